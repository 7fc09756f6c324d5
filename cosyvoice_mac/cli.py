"""Command line: ``python -m cosyvoice_mac synth --prompt-wav F --text T --out F.wav``.

``synth`` sends its job to the running app (``--server``, default http://127.0.0.1:7860), so it waits in the
same queue as the page's and the API's jobs (``cli_app``); with no app running, or ``--local``, it starts the
app's engine in this process (``cli_engine``). Either way the WAV and its sidecar (``interface: cli``) are
saved in outputs/ and copied to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cosyvoice_mac.errors import CosyVoiceError, RequestError
from cosyvoice_mac.longform.cli import add_post_arguments, post_settings
from cosyvoice_mac.mlx import ENGINE_HELP, ENGINES
from cosyvoice_mac.request import SPEED_RANGE

EXIT_REFUSED = 2  # the message says why
EXIT_TRY_LATER = 75  # sysexits' EX_TEMPFAIL: the app's queue is full or its model loads; the same command works later
EXIT_INTERRUPTED = 130  # the shell's code for a command ended by Ctrl-C

# The request contract's fields -> the flags that set them, so a refusal names what the user typed.
CONTRACT_FLAGS = {
    "text": "--text",
    "transcript": "--prompt-text",
    "instruct": "--instruct",
    "mode": "--instruct",
    "seed": "--seed",
    "speed": "--speed",
    "voice": "--prompt-wav/--voice",
    "trim": "--trim",
    "loudness_lufs": "--loudness",
    "post": "--loudness",
}

LOCAL_ONLY = {  # flag -> (argument, default): how the model is built, so the app's own settings rule there
    "--device": ("device", "auto"),
    "--precision": ("precision", None),
    "--dtype": ("dtype", None),
    "--llm-dtype": ("llm_dtype", None),
    "--flow-dtype": ("flow_dtype", None),
    "--reprobe": ("reprobe", False),
    "--engine": ("engine", None),
    "--vocoder": ("vocoder", "torch"),
    "--compute-units": ("compute_units", "ALL"),
    "--outputs-dir": ("outputs_dir", None),
}


def _add_synth(commands) -> None:
    synth = commands.add_parser(
        "synth",
        help="speak text in the voice of a prompt recording",
        description="Speak text in the voice of a prompt recording or a saved voice. With the app running, "
        "the job joins its queue (as page and API jobs do; Ctrl-C cancels it there); else the app's engine "
        "runs here. The WAV and its sidecar are saved in outputs/ and copied to --out.",
        epilog=f"Exit codes: 0 done, {EXIT_REFUSED} refused or failed (the message says why), {EXIT_TRY_LATER} the "
        f"app's queue is full or its model is loading (try again later), {EXIT_INTERRUPTED} cancelled with Ctrl-C.",
    )
    source = synth.add_mutually_exclusive_group()
    source.add_argument(
        "--model",
        help="model folder, a folder name under models/, or 'preview' (default: as the "
        "app picks: a CosyVoice3 folder in models/, else any model, else the preview voice)",
    )
    source.add_argument(
        "--random-weights",
        choices=("cosyvoice3", "cosyvoice2"),
        help="build the full-size architecture with RANDOM weights (benchmarks only: the audio is noise)",
    )
    voice = synth.add_mutually_exclusive_group(required=True)
    voice.add_argument("--prompt-wav", type=Path, help="3-30 s of speech in the target voice (sent to the app)")
    voice.add_argument("--voice", help="a saved voice's name or id ('preview': the preview voice's own)")
    synth.add_argument("--text", required=True, help="text to speak")
    synth.add_argument("--prompt-text", help="transcript of the prompt (zero-shot mode)")
    synth.add_argument("--instruct", help='instruction, e.g. "speak sadly" or "用四川话说" (instruct mode)')
    synth.add_argument("--seed", type=int, help="sampling seed (the same seed gives the same audio)")
    synth.add_argument("--speed", type=float, default=1.0, help=f"{SPEED_RANGE[0]:g}-{SPEED_RANGE[1]:g}, 1.0 = natural")
    synth.add_argument("--device", default="auto", help="auto (mps, cuda, cpu), mps, cuda or cpu")
    add_precision_arguments(synth)
    synth.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help=f"{ENGINE_HELP} (default $COSYVOICE_ENGINE, else auto)",
    )
    synth.add_argument("--stream", action="store_true", help="synthesise in chunks (prints time to first audio)")
    add_post_arguments(synth, "of the output")
    synth.add_argument(
        "--vocoder",
        choices=("torch", "coreml"),
        default="torch",
        help="coreml: run the vocoder with Core ML (macOS; converted on first use)",
    )
    synth.add_argument(
        "--compute-units",
        default="ALL",
        choices=("ALL", "CPU_AND_GPU", "CPU_AND_NE", "CPU_ONLY"),
        help="where Core ML may run the vocoder",
    )
    synth.add_argument("--out", type=Path, required=True, help="output WAV path")
    add_app_arguments(synth)
    synth.add_argument(
        "--outputs-dir", type=Path, help="where --local saves the WAV and its sidecar (default: the app's outputs/)"
    )
    synth.set_defaults(handler=_synth)


def add_app_arguments(parser) -> None:
    """--server, --local, --api-key: where the work runs (``cli_app.connect``)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--server",
        metavar="URL",
        help="the running app to send the job to (default $COSYVOICE_SERVER, else http://127.0.0.1:7860; "
        "when none answers there, the model runs here). Given, it must answer",
    )
    where.add_argument("--local", action="store_true", help="run the model in this process even if the app runs")
    parser.add_argument("--api-key", help="the app's API key, if it was started with one (default $COSYVOICE_API_KEY)")


def add_precision_arguments(parser) -> None:
    """--precision, --dtype (the LLM's), --llm-dtype, --flow-dtype, --reprobe: the CLI's and the app's."""
    parser.add_argument(
        "--precision",
        choices=("auto", "float32"),
        default=None,
        help="auto (default): each stage not named runs in the fastest dtype the quality gate "
        "allows here, measured once per machine; float32: every stage not named in float32",
    )
    parser.add_argument(
        "--dtype",
        default=None,
        help="the LLM's dtype (as $COSYVOICE_DTYPE): float32, float16, "
        "bfloat16 or int8; the flow keeps its own (see --flow-dtype)",
    )
    parser.add_argument("--llm-dtype", default=None, help="the LLM's dtype (wins over --dtype)")
    parser.add_argument("--flow-dtype", default=None, help="the flow's dtype: float32, float16 or bfloat16")
    parser.add_argument("--reprobe", action="store_true", help="measure this machine's precision timings again")


def precision_kwargs(args) -> dict:
    return {
        "precision": args.precision,
        "dtype": args.dtype,
        "llm_dtype": args.llm_dtype,
        "flow_dtype": args.flow_dtype,
        "reprobe": args.reprobe,
    }


def host_precision(args) -> dict:
    """The precision choices the app's model host passes to the pipeline (the LLM's dtype travels apart)."""
    return {key: value for key, value in precision_kwargs(args).items() if key != "dtype" and value}


def host_vocoder(args) -> str:
    """--vocoder and --compute-units as the model host's choice (``webui.state.VOCODER_CHOICES``)."""
    return "torch" if args.vocoder == "torch" else f"coreml:{args.compute_units}"


def _request(args, saved_transcript: str | None = None):
    """The request the page would queue for these arguments, checked before anything is sent or loaded: a
    flag given asks for its mode, so ``--instruct ""`` is refused as the page refuses an empty instruction.
    A saved voice speaks zero-shot with ``saved_transcript`` (its own) unless --prompt-text says otherwise."""
    from cosyvoice_mac.request import Request, Voice

    mode = "instruct" if args.instruct is not None else "zero_shot" if args.prompt_text is not None else None
    if args.prompt_wav is not None:
        _check_prompt(args.prompt_wav)
        voice = Voice.recording(args.prompt_wav, transcript=args.prompt_text)
    elif args.voice == "preview":
        voice = Voice.builtin()
    else:
        voice = Voice.saved_voice(args.voice, transcript=args.prompt_text or saved_transcript)
    return Request.build(
        args.text,
        voice,
        mode=mode,
        instruct=args.instruct,
        seed=args.seed,
        speed=args.speed,
        stream=args.stream,
        post=post_settings(args),
    )


def _check_prompt(path: Path) -> None:
    """Refuse a prompt file that is no usable speech now, in the check's sentence, before it is sent or loaded."""
    from cosyvoice_mac.sound.prompt_check import inspect_prompt

    if not path.is_file():
        raise CosyVoiceError(f"the prompt recording {path} does not exist")
    check = inspect_prompt(path)
    if not check.ok:
        raise CosyVoiceError(check.sentence)


def _synth(args) -> int:
    if args.local or args.random_weights is not None:  # random weights are a benchmark of this machine
        return _synth_here(args)
    from cosyvoice_mac.cli_app import connect, note_local_only

    request = _request(args)
    app = connect(args)
    if app is None:
        return _synth_here(args)
    try:
        note_local_only(args, LOCAL_ONLY)
        return app.speak(request, args.model, args.out, args.stream)
    finally:
        app.close()


def _synth_here(args) -> int:
    """The app's engine in this process (``cli_engine``): outputs/ and the voice library are the app's."""
    from cosyvoice_mac.cli_engine import synth_locally

    saved = None
    if args.voice is not None and args.voice != "preview":
        from cosyvoice_mac.engine.voice_library import VoiceLibrary

        saved = VoiceLibrary().get(args.voice).get("transcript")  # an unknown name is refused before loading
    request = _request(args, saved_transcript=saved)
    if args.outputs_dir is not None:
        outputs = args.outputs_dir
    else:
        from cosyvoice_mac.webui.app import DEFAULT_OUTPUTS_DIR as outputs
    return synth_locally(args, request, Path(outputs).expanduser())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cosyvoice_mac", description="CosyVoice voice cloning")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_synth(commands)
    __import__("cosyvoice_mac.coreml.cli", fromlist=["add_coreml"]).add_coreml(commands)
    __import__("cosyvoice_mac.longform.cli", fromlist=["add_longform"]).add_longform(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except CosyVoiceError as error:  # ours: the message is written for the user
        flag = CONTRACT_FLAGS.get(error.field) if isinstance(error, RequestError) else None
        print(f"error: {flag + ': ' if flag else ''}{error}", file=sys.stderr)
        return getattr(error, "exit_code", EXIT_REFUSED)
    except KeyboardInterrupt:  # before any job was queued (a running one is cancelled where it runs)
        print("cancelled (Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
