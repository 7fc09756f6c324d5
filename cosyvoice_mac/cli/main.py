"""The ``cosyvoice-mac`` command (also ``python -m cosyvoice_mac``): ``serve`` starts the app; ``synth``,
``voices``, ``dialogue``, ``dub``, ``batch``, ``glossary``, ``download``, ``bench``, ``coreml`` and ``verify`` do
the rest.

``cosyvoice-mac synth --prompt-wav F --text T --out F.wav`` sends its job to the running app (``--server``,
default http://127.0.0.1:7860), so it waits in the same queue as the page's and the API's jobs
(``cli.remote``); with no app running, or ``--local``, it starts the app's engine in this process
(``cli.local``). Either way the WAV and its sidecar (``interface: cli``) are saved in outputs/ and copied
to ``--out``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Callable

from cosyvoice_mac.cli.common import (
    CONTRACT_FLAGS,
    EXIT_CODES_HELP,
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    add_app_arguments,
    add_model_arguments,
    add_post_arguments,
    local_only_flags,
    post_settings,
)
from cosyvoice_mac.cli.convert import add_convert
from cosyvoice_mac.cli.coreml import add_coreml
from cosyvoice_mac.cli.longform import add_longform
from cosyvoice_mac.cli.verify import add_verify
from cosyvoice_mac.cli.voices import add_voices
from cosyvoice_mac.errors import CosyVoiceError, RequestError
from cosyvoice_mac.preview import PREVIEW
from cosyvoice_mac.settings import add_argument
from cosyvoice_mac.settings.fields import SAMPLING_FIELDS


def _add_synth(commands) -> None:
    synth = commands.add_parser(
        "synth",
        help="speak text in the voice of a prompt recording",
        description="Speak text in the voice of a prompt recording or a saved voice. With the app running, "
        "the job joins its queue (as page and API jobs do; Ctrl-C cancels it there); else the app's engine "
        "runs here. The WAV and its sidecar are saved in outputs/ and copied to --out.",
        epilog=EXIT_CODES_HELP,
    )
    source = synth.add_mutually_exclusive_group()
    add_argument(source, "model")
    add_argument(source, "random_weights")
    voice = synth.add_mutually_exclusive_group(required=True)
    voice.add_argument("--prompt-wav", type=Path, help="3-30 s of speech in the target voice (sent to the app)")
    voice.add_argument("--voice", help="a saved voice's name or id ('preview': the preview voice's own)")
    synth.add_argument("--style", help="with --voice: its recording of this style (happy, whisper, ...)")
    synth.add_argument("--text", required=True, help="text to speak")
    synth.add_argument("--prompt-text", help="transcript of the prompt (zero-shot mode)")
    add_argument(synth, "prompt_trim")
    for name in ("instruct", "seed", "speed"):
        add_argument(synth, name)
    sampling = synth.add_argument_group("sampling (unset: the model's own)")
    for name in SAMPLING_FIELDS:
        add_argument(sampling, name)
    add_model_arguments(synth, vocoder=True)
    add_argument(synth, "stream")
    add_argument(synth, "no_check")
    add_argument(synth, "captions")
    add_post_arguments(synth)
    synth.add_argument("--out", type=Path, required=True, help="output WAV path")
    add_app_arguments(synth)
    add_argument(synth, "outputs_dir")
    synth.set_defaults(handler=_synth)


def _request(args, saved_transcript: str | None = None, voice_styles: tuple[str, ...] | None = None):
    """The request the page would queue for these arguments, checked before anything is sent or loaded: a
    flag given asks for its mode, so ``--instruct ""`` is refused as the page refuses an empty instruction.
    A saved voice speaks zero-shot with ``saved_transcript`` (its own) unless --prompt-text says otherwise;
    its inline style tags may name ``voice_styles`` (None: its styles are the app's to know, which checks them
    as the job enters its queue, so any well-formed style name passes here)."""
    from dataclasses import replace

    from cosyvoice_mac.frontend.inline import parse_inline
    from cosyvoice_mac.request import Request, Sampling, Voice

    mode = "instruct" if args.instruct is not None else "zero_shot" if args.prompt_text is not None else None
    if args.prompt_wav is not None:
        args.prompt_wav = _check_prompt(args.prompt_wav, getattr(args, "prompt_trim", "off"))
        voice = Voice.recording(args.prompt_wav, transcript=args.prompt_text)
    elif args.voice == PREVIEW:
        voice = Voice.builtin()
    else:
        voice = Voice.saved_voice(args.voice, transcript=args.prompt_text or saved_transcript)
    request = Request.build(
        args.text,
        replace(voice, style=(args.style or "").strip() or None),  # the contract refuses a style of no saved voice
        mode=mode,
        instruct=args.instruct,
        seed=args.seed,
        speed=args.speed,
        stream=args.stream,
        post=post_settings(args),
        sampling=Sampling.build(**{name: getattr(args, name) for name in SAMPLING_FIELDS}),
        check=False if args.no_check else None,
    )
    # a malformed inline tag, said before anything is sent, loaded or queued
    parse_inline(request.text, voice_styles if voice.kind == "saved" else ())
    return request


def _check_prompt(path: Path, trim: str | None = "off") -> Path:
    """The prompt file to send: ``path``, or the part ``--prompt-trim`` keeps (auto: the clearest 12 s of one over
    the limit; START-END: that span, whatever the length), a file in a temporary folder, said on stderr. A file that
    is no usable voice (the voice library's one rule, a tone or music included) is refused in the check's sentence,
    before anything is sent or loaded."""
    import sys
    import tempfile

    from cosyvoice_mac.engine.voice_library import judge_voice_audio
    from cosyvoice_mac.sound.clearest import cut_prompt, parse_trim, wants_cut, with_trim_hint

    try:
        chosen = parse_trim(trim, "--prompt-trim")
    except ValueError as error:
        raise CosyVoiceError(str(error)) from None
    if not path.is_file():
        raise CosyVoiceError(f"the prompt recording {path} does not exist")
    check = judge_voice_audio(path)
    if wants_cut(chosen, check.problem == "too_long"):
        try:
            path, span = cut_prompt(path, chosen, tempfile.mkdtemp(prefix="cosyvoice-prompt-"))
        except ValueError as error:  # the span starts after the recording ends
            raise CosyVoiceError(f"--prompt-trim: {error}") from None
        print(f"kept {span.seconds:.1f} s of the prompt ({span.start:.1f}-{span.end:.1f} s)", file=sys.stderr)
        check = judge_voice_audio(path)
    if check.problem == "too_long":
        raise CosyVoiceError(with_trim_hint(check.sentence, "cli"))
    if not check.ok:
        raise CosyVoiceError(check.sentence)
    return path


def _synth(args) -> int:
    if args.local or args.random_weights is not None:  # random weights are a benchmark of this machine
        return _synth_here(args)
    from cosyvoice_mac.cli.remote import connect, note_local_only

    request = _request(args)
    app = connect(args)
    if app is None:
        return _synth_here(args)
    try:
        note_local_only(args, local_only_flags())
        return app.speak(request, args.model, args.out, args.stream, args.captions)
    finally:
        app.close()


def _synth_here(args) -> int:
    """The app's engine in this process (``cli.local``): outputs/ and the voice library are the app's."""
    from cosyvoice_mac.cli.local import synth_locally

    saved, styles = None, ()
    if args.voice is not None and args.voice != PREVIEW:
        from cosyvoice_mac.engine.voice_library import VoiceLibrary

        # an unknown name or style is refused before loading, naming the voice's styles
        entry = VoiceLibrary().styled(args.voice, (args.style or "").strip() or None)
        saved, styles = entry.get("transcript"), tuple(recording["style"] for recording in entry["recordings"])
    request = _request(args, saved, styles)
    if args.outputs_dir is not None:
        outputs = args.outputs_dir
    else:
        from cosyvoice_mac.paths import default_outputs_dir

        outputs = default_outputs_dir()
    return synth_locally(args, request, Path(outputs).expanduser())


# Commands whose own parser reads the rest of the line: name -> (help, "module:function" taking argv).
# ``serve`` is the composition root's, handed to ``main``; the others are modules below the front ends.
PASSED_ON = {
    "serve": ("start the web page and the /v1 API (as `bash run.sh`; serve --help for its options)", None),
    "download": ("fetch a model into models/ (download --help)", "cosyvoice_mac.download:main"),
    "bench": ("time the full-size models on this machine (bench --help)", "cosyvoice_mac.bench.cli:main"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cosyvoice-mac", description="CosyVoice voice cloning")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (summary, _) in PASSED_ON.items():
        commands.add_parser(name, help=summary, add_help=False)
    _add_synth(commands)
    add_convert(commands)
    add_coreml(commands)
    add_longform(commands)
    add_voices(commands)
    add_verify(commands)
    return parser


def _pass_on(name: str, argv: list[str], serve: Callable[[list[str]], int] | None) -> int:
    if name == "serve":
        if serve is None:
            print("error: serve starts the app; run `cosyvoice-mac serve` or `bash run.sh`", file=sys.stderr)
            return EXIT_REFUSED
        return serve(argv)
    module, _, function = PASSED_ON[name][1].partition(":")
    return getattr(importlib.import_module(module), function)(argv)


def main(argv: list[str] | None = None, serve: Callable[[list[str]], int] | None = None) -> int:
    """Run one command; its exit code. ``serve`` is the server's entry (the composition root passes it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in PASSED_ON:
        return _pass_on(argv[0], argv[1:], serve)
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
