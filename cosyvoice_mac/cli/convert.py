"""``cosyvoice-mac convert SOURCE --voice NAME --out OUT.wav``: a recording re-spoken in a saved voice (or in the
voice of ``--prompt-wav``), its words and timing kept.

Like ``synth`` it sends its job to the running app when one answers (``/v1/audio/voice-conversion`` with
``X-CosyVoice-Interface: cli``: the job waits in the app's one queue, Ctrl-C closes the connection and the
app cancels it), else, or with ``--local``, it starts the app's engine in this process (``cli.local``). The
WAV and its sidecar (``mode: voice_conversion``, the source's hash and duration) land in the app's outputs/,
and a copy at ``--out``. The source is checked here first (``sound.source_check``), so a silent or unreadable
file is refused before anything is sent or loaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from cosyvoice_mac.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    EXIT_TRY_LATER,
    add_app_arguments,
    add_model_arguments,
    add_post_arguments,
    local_only_flags,
    post_settings,
)
from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.preview import PREVIEW
from cosyvoice_mac.settings import add_argument
from cosyvoice_mac.wire import CONVERSION_PATH


def add_convert(commands) -> None:
    convert = commands.add_parser(
        "convert",
        help="re-speak a recording in a saved voice (voice conversion)",
        description="Re-speak a recording in a saved voice or in the voice of --prompt-wav, keeping its words "
        "and timing (no text needed; the same input gives the same output). With the app running, the job "
        "joins its queue; else the app's engine runs here. The WAV and its sidecar are saved in outputs/ and "
        "copied to --out.",
        epilog=f"Exit codes: 0 done, {EXIT_REFUSED} refused or failed (the message says why), {EXIT_TRY_LATER} the "
        f"app's queue is full or its model is loading, {EXIT_INTERRUPTED} cancelled with Ctrl-C.",
    )
    convert.add_argument("source", type=Path, help="the recording to convert (any length up to 10 min, 8 kHz+)")
    voice = convert.add_mutually_exclusive_group(required=True)
    voice.add_argument("--voice", help="the target: a saved voice's name or id ('preview': the preview voice's own)")
    voice.add_argument("--prompt-wav", type=Path, help="the target: 3-30 s of speech in that voice")
    convert.add_argument("--out", type=Path, required=True, help="output WAV path")
    add_argument(convert, "speed")
    add_argument(convert, "stream")
    add_argument(convert, "model")
    add_model_arguments(convert)
    add_post_arguments(convert)
    add_app_arguments(convert)
    add_argument(convert, "outputs_dir")
    convert.set_defaults(handler=run_convert, random_weights=None)


def conversion_request(args):
    """The request the page would queue for these arguments, with the source and the prompt checked now."""
    from cosyvoice_mac.conversion_request import ConversionRequest
    from cosyvoice_mac.request import Voice
    from cosyvoice_mac.sound.prompt_check import inspect_prompt
    from cosyvoice_mac.sound.source_check import inspect_source

    check = inspect_source(args.source)
    if not check.ok:
        raise CosyVoiceError(check.sentence)
    if args.prompt_wav is not None:
        prompt = inspect_prompt(args.prompt_wav)
        if not prompt.ok:
            raise CosyVoiceError(f"--prompt-wav: {prompt.sentence}")
        voice = Voice.recording(args.prompt_wav)
    elif args.voice == PREVIEW:
        voice = Voice.builtin()
    else:
        voice = Voice.saved_voice(args.voice)
    return ConversionRequest.build(
        str(args.source), voice, speed=args.speed, stream=args.stream, post=post_settings(args)
    )


def run_convert(args) -> int:
    from cosyvoice_mac.cli.remote import connect, note_local_only

    request = conversion_request(args)
    app = None if args.local else connect(args)
    if app is None:
        return _convert_here(args, request)
    try:
        note_local_only(args, local_only_flags())
        return send_conversion(app, request, args.model, args.out)
    finally:
        app.close()


def _convert_here(args, request) -> int:
    from cosyvoice_mac.cli.local import synth_locally

    if request.voice.kind == "saved":
        from cosyvoice_mac.engine.voice_library import VoiceLibrary

        VoiceLibrary().get(request.voice.saved)  # an unknown name is refused before the model loads
    if args.outputs_dir is not None:
        outputs = args.outputs_dir
    else:
        from cosyvoice_mac.paths import default_outputs_dir

        outputs = default_outputs_dir()
    return synth_locally(args, request, Path(outputs).expanduser())


def send_conversion(app, request, model: str | None, out: Path) -> int:
    """Upload ``request``'s source (and prompt) to the app's conversion route and write the audio to ``out``."""
    from cosyvoice_mac.cli.remote import PROBE_TIMEOUT_S

    stream = request.stream and not request.post.active
    if request.stream and request.post.active:
        print("note: --trim/--loudness need the whole audio, so the app sends it in one piece", file=sys.stderr)
    form = {"response_format": "wav", "speed": str(request.speed), "stream": str(stream).lower()}
    if stream:  # server-sent events: the last one says whether the app saved the result
        form["stream_format"] = "sse"
    form["trim"] = str(request.post.trim).lower()
    if request.post.loudness_lufs is not None:
        form["loudness_lufs"] = str(request.post.loudness_lufs)
    if model:
        form["model"] = Path(model).name
    voice = request.voice
    if voice.kind != "audio":
        form["voice"] = voice.saved if voice.kind == "saved" else PREVIEW
        app._voice_asked = form["voice"]
    timeout = httpx.Timeout(PROBE_TIMEOUT_S, read=None, write=120.0)

    def send() -> httpx.Response:  # the files are read again for each try (the app may still be loading)
        files = {"audio": (Path(request.source.audio).name, Path(request.source.audio).read_bytes())}
        if voice.kind == "audio":
            files["prompt_audio"] = (Path(voice.audio).name, Path(voice.audio).read_bytes())
        built = app.http.build_request("POST", CONVERSION_PATH, data=form, files=files, timeout=timeout)
        return app.http.send(built, stream=True)

    return app.deliver(send, out, stream)
