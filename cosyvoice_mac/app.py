"""The composition root: the one place that puts the model host, the page, the ``/v1`` API and the CLI together.

``serve`` starts the server: it parses the command line, starts the model worker, serves the page with the
API mounted beside it, and cleans up on exit. ``main`` is the ``cosyvoice-mac`` command (and
``python -m cosyvoice_mac``): the CLI, whose ``serve`` command is ``serve`` here.

It binds 127.0.0.1 unless the user passes another ``--host``; Ctrl-C (or SIGTERM) closes the server,
stops the worker, removes Gradio's temporary folder and exits 0. Gradio is imported only after
GRADIO_TEMP_DIR points at a folder this process owns, so uploads never land anywhere else.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from cosyvoice_mac.cli.common import host_precision, host_vocoder
from cosyvoice_mac.config import ConfigError
from cosyvoice_mac.engine import VoiceLibrary
from cosyvoice_mac.engine.host import HostConfig, ModelHost, Settings, starting_engine, starting_mlx_llm
from cosyvoice_mac.frontend.glossary import glossary_store
from cosyvoice_mac.mlx import requested_engine
from cosyvoice_mac.paths import (
    DEFAULT_HOST,
    default_models_dir,
    default_outputs_dir,
    forget_running_app,
    record_running_app,
)
from cosyvoice_mac.preview.labels import DOWNLOAD_COMMAND, PREVIEW_LABEL
from cosyvoice_mac.request import MAX_UPLOAD_BYTES
from cosyvoice_mac.settings import add_argument, env_value, out_of_range
from cosyvoice_mac.webui.page import TITLE, build_app, page_css, title_js
from cosyvoice_mac.webui.temp_janitor import TempJanitor

MAX_UPLOAD = f"{MAX_UPLOAD_BYTES >> 20}mb"  # Gradio's spelling of request.MAX_UPLOAD_BYTES
# serve's options, in --help's order; the settings table declares each (flag, default, range, help).
SERVE_SETTINGS = ("host", "port", "models_dir", "outputs_dir", "cache_dir", "model", "device")
SERVE_SETTINGS += ("precision", "dtype", "llm_dtype", "flow_dtype", "reprobe", "engine", "max_queue")
SERVE_SETTINGS += ("allowed_origin", "allowed_host", "temp_max_age", "hang_timeout", "torch_threads", "vocoder")
SERVE_SETTINGS += ("compute_units", "api_key", "no_auth", "cluster")
TEMP_PREFIX = "cosyvoice-mac-ui-"


def build_serve_parser() -> argparse.ArgumentParser:
    """``serve``'s options, each as the settings table declares it."""
    parser = argparse.ArgumentParser(prog="cosyvoice-mac serve", description=f"Start the {TITLE} web UI.")
    for name in SERVE_SETTINGS:
        add_argument(parser, name)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_serve_parser()
    args = parser.parse_args(argv)
    refusal = _exposure_refusal(args)
    if refusal:
        parser.error(refusal)
    try:
        requested_engine(args.engine)  # a bad $COSYVOICE_ENGINE is named now, not by the model process
    except ConfigError as error:
        parser.error(str(error))
    for name in ("max_queue", "temp_max_age", "hang_timeout", "torch_threads"):
        problem = out_of_range(name, getattr(args, name))
        if problem:
            parser.error(problem)
    args.cluster = (args.cluster or env_value("cluster") or "").strip() or None
    if args.cluster:
        problem = _cluster_problem(args.cluster)
        if problem:
            parser.error(problem)
    args.models_dir = (args.models_dir or default_models_dir()).expanduser()
    args.outputs_dir = (args.outputs_dir or default_outputs_dir()).expanduser()
    return args


def serve(argv: list[str] | None = None) -> int:
    """Start the server (``cosyvoice-mac serve``, ``python app.py``, ``bash run.sh``); 0 after Ctrl-C."""
    args = parse_args(argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # a local app phones no one
    temp_dir = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
    os.environ["GRADIO_TEMP_DIR"] = str(temp_dir)  # before gradio is imported: it reads this once
    janitor = TempJanitor(temp_dir, args.temp_max_age).start()
    outputs_dir = args.outputs_dir.resolve()
    cache_dir = args.cache_dir.expanduser() if args.cache_dir else None
    settings = Settings(cache_dir)
    cluster = _cluster_link(args.cluster, cache_dir)
    host = ModelHost(
        HostConfig(
            models_dir=args.models_dir,
            outputs_dir=outputs_dir,
            cache_dir=cache_dir,
            device=args.device,
            dtype=args.dtype,
            max_queue=args.max_queue,
            torch_threads=args.torch_threads,
            liveness_timeout_s=args.hang_timeout,
            preferred_model=args.model,
            vocoder=host_vocoder(args),
            precision=host_precision(args),
            engine=starting_engine(args.engine, settings),
            mlx_llm=starting_mlx_llm(settings),
        ),
        worker_factory=cluster,
    )
    library_problem = VoiceLibrary(host.config.cache_dir).problem()  # sets a damaged voice list aside
    if library_problem:
        print(f"Note: {library_problem}.", file=sys.stderr, flush=True)
    glossary = glossary_store(host.config.cache_dir)
    glossary_problem = glossary.problem()
    if glossary_problem:
        until = " Until then every job is spoken without it." if glossary.damaged() else ""
        print(f"Note: {glossary_problem}.{until}", file=sys.stderr, flush=True)
    server = None
    # Ctrl-C (SIGINT, even when started in the background with it ignored) and SIGTERM both close the
    # server and exit 0.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        host.start()  # loads in the worker process while the page starts
        from cosyvoice_mac.api import serve_page

        try:
            server = serve_page(
                build_app(host=host, settings=settings),
                host,
                bind_host=args.host,
                port=args.port,
                api_key=args.api_key,
                no_auth=args.no_auth,
                max_queue=args.max_queue,
                upload_limit_bytes=MAX_UPLOAD_BYTES,
                ssr_mode=False,
                show_error=True,
                max_file_size=MAX_UPLOAD,
                origin_policy=_origin_policy(args),
                # the results; a saved voice's recording plays from a copy in the temp folder (voice_cards)
                allowed_paths=[str(outputs_dir)],
                blocked_paths=[str(args.models_dir.resolve())],
                footer_links=["gradio"],
                css=page_css(),
                js=title_js(),
            )
        except OSError:
            print(
                f"Cannot listen on {args.host}:{args.port}: the port is taken (is the app already running?) or "
                f"the address is not one of this machine's. Stop the other server or pick another port: "
                f"bash run.sh --port {args.port + 1}",
                file=sys.stderr,
            )
            return 1
        try:  # where the CLI finds this app, whatever its port
            record_running_app(_address_for_this_machine(server), host.config.cache_dir)
        except OSError as error:
            print(f"Note: the CLI will not find this app by itself ({error.strerror}); give it --server", flush=True)
        print(f"{TITLE} is running at {server.url}  (Ctrl-C to stop)", flush=True)
        print(f"OpenAI-compatible API: {server.url}v1/audio/speech" + _api_access_note(args), flush=True)
        if cluster is not None:
            print(f"Every job runs on the workers of the Ray cluster at {args.cluster} (docs/cluster.md)", flush=True)
        if _access(args).open_to_everyone:
            print(
                f"Warning: --no-auth: {args.host} is reachable from other machines and nothing asks for a key; "
                "anyone who can reach this machine may use the page and the APIs. Restart with --api-key KEY "
                "to lock it.",
                file=sys.stderr,
                flush=True,
            )
        if not host.models():
            print(f"No model installed yet in {args.models_dir}. Get one with: {DOWNLOAD_COMMAND}", flush=True)
            if host.current is not None and host.current.is_preview:
                print(f"Until then the preview voice speaks. {PREVIEW_LABEL}.", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("Closing the server (Ctrl-C).", flush=True)
    finally:
        # A second Ctrl-C while the server shuts down would only print a traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if server is not None:
            forget_running_app(host.config.cache_dir)
            server.close()
        host.close()
        if cluster is not None:
            cluster.close()
        janitor.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
    return 0


def _cluster_problem(address: str) -> str | None:
    """Why the app cannot run its jobs on the cluster at ``address`` (no Ray here, a bad ``local:N``), or None."""
    from cosyvoice_mac.cluster import ClusterError
    from cosyvoice_mac.cluster.pool import import_ray, local_workers

    try:
        import_ray()
        local_workers(address)
    except ClusterError as error:
        return f"--cluster {address}: {error}"
    return None


def _cluster_link(address: str | None, cache_dir: Path | None):
    """What runs the app's jobs on the cluster at ``address`` (the engine's worker factory); None: a worker
    process on this computer."""
    if address is None:
        return None
    from cosyvoice_mac.cluster.queue_worker import ClusterLink

    return ClusterLink(address, str(cache_dir) if cache_dir else None)


def _address_for_this_machine(server) -> str:
    """The server's address as a client on this machine reaches it (a bind to every address answers on
    127.0.0.1 too)."""
    from cosyvoice_mac.api.origin_guard import WILDCARD_BINDS

    if server.host in WILDCARD_BINDS:
        return f"http://{DEFAULT_HOST}:{server.port}/"
    return server.url


def _origin_policy(args: argparse.Namespace):
    from cosyvoice_mac.api.origin_guard import OriginPolicy

    return OriginPolicy.for_server(args.host, args.allowed_origin, args.allowed_host)


def _access(args: argparse.Namespace):
    from cosyvoice_mac.api import ApiAccess

    return ApiAccess.from_settings(args.host, args.api_key, args.no_auth)


def _exposure_refusal(args: argparse.Namespace) -> str | None:
    """Why these arguments may not start a server, or None: a bind beyond this computer needs a key or an
    explicit --no-auth, never an accident."""
    access = _access(args)
    if access.no_auth and access.api_key is not None:
        return "--no-auth and an API key (--api-key or $COSYVOICE_API_KEY) contradict each other; give one"
    if access.refuses_all:
        return (
            f"--host {args.host} lets other machines reach this app, and it has no key. Lock it with "
            "--api-key KEY (or set COSYVOICE_API_KEY): the page asks for the key once, API clients send "
            "'Authorization: Bearer KEY'. To open it to everyone who can reach this machine instead, add --no-auth"
        )
    return None


def _api_access_note(args: argparse.Namespace) -> str:
    access = _access(args)
    if access.locks_every_door:
        return " (send Authorization: Bearer <key>; the page, the Gradio API and uploads need the key too)"
    return " (send Authorization: Bearer <key>)" if access.key_required else ""


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """The ``cosyvoice-mac`` command: every CLI command, ``serve`` starting the server."""
    from cosyvoice_mac.cli.main import main as cli_main

    return cli_main(argv, serve=serve)
