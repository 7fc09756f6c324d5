"""The web page: for now a title and which models are installed (the synthesis UI comes later).

It binds 127.0.0.1 unless the user passes another ``--host``; Ctrl-C closes the server and exits 0.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODELS_DIR = REPO_ROOT / "models"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
TITLE = "CosyVoice for Mac"
MODEL_CONFIG_NAMES = ("cosyvoice3.yaml", "cosyvoice2.yaml")
NO_MODEL_MESSAGE = "No model installed yet. Run: bash run.sh download cosyvoice3"


def installed_models(models_dir: Path) -> list[Path]:
    """Model folders directly under ``models_dir``: those holding cosyvoice2.yaml or cosyvoice3.yaml."""
    if not models_dir.is_dir():
        return []
    return sorted(
        folder
        for folder in models_dir.iterdir()
        if folder.is_dir() and any((folder / name).is_file() for name in MODEL_CONFIG_NAMES)
    )


def build_app(models_dir: Path = DEFAULT_MODELS_DIR):
    """The Gradio Blocks page for the models found in ``models_dir``."""
    import gradio as gr

    models = installed_models(models_dir)
    with gr.Blocks(title=TITLE) as app:
        gr.Markdown(f"# {TITLE}")
        if models:
            names = ", ".join(folder.name for folder in models)
            gr.Markdown(f"Installed models: {names}")
        else:
            gr.Markdown(NO_MODEL_MESSAGE)
    return app


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.py", description=f"Start the {TITLE} web UI.")
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}: this computer only; "
        "give your network address to let other machines in)",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument(
        "--models-dir", type=Path, default=DEFAULT_MODELS_DIR, help="folder holding model folders (default models/)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # a local app phones no one
    app = build_app(args.models_dir)
    # Ctrl-C (SIGINT, even when started in the background with it ignored) and SIGTERM both close the
    # server and exit 0.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        app.launch(
            server_name=args.host,
            server_port=args.port,
            ssr_mode=False,
            show_error=True,
            quiet=True,
            prevent_thread_lock=True,
        )
    except OSError:
        print(
            f"Cannot listen on {args.host}:{args.port}: the port is taken (is the app already running?) or "
            f"the address is not one of this machine's. Stop the other server or pick another port: "
            f"bash run.sh --port {args.port + 1}",
            file=sys.stderr,
        )
        return 1
    print(f"{TITLE} is running at {app.local_url}  (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("Closing the server (Ctrl-C).", flush=True)
    finally:
        # A second Ctrl-C while the server shuts down would only print a traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        app.close()
    return 0


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt
