"""Command line for long work: ``dialogue``, ``dub``, ``batch`` and ``glossary`` (see ``--help`` of each).

Every line is an ordinary job of the app's engine (``cli.local``), recorded ``interface: cli`` in its
sidecar in outputs/, with the glossary applied by the worker and saved voices from the voice library (save
one on the page, or with ``python -m cosyvoice_mac voices add``). A tqdm bar shows progress; Ctrl-C cancels
the line in flight and keeps the finished ones (a second Ctrl-C quits at once).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from cosyvoice_mac.cli.common import (
    EXIT_INTERRUPTED,
    LOCAL_ONLY,
    add_app_arguments,
    add_post_arguments,
    add_precision_arguments,
    post_settings,
)
from cosyvoice_mac.longform import LongformError
from cosyvoice_mac.request import PostSettings


def add_longform(commands) -> None:
    from cosyvoice_mac.mlx import ENGINE_HELP, ENGINES

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--model",
        help="model folder, a folder name under models/, or 'preview' (default: as the app picks: a "
        "CosyVoice3 folder in models/, else any model, else the preview voice)",
    )
    common.add_argument("--models-dir", type=Path, default=None, help=argparse.SUPPRESS)
    common.add_argument("--device", default="auto", help="auto (mps, cuda, cpu), mps, cuda or cpu")
    add_precision_arguments(common)
    common.add_argument("--engine", choices=ENGINES, default=None, help=f"{ENGINE_HELP} (default $COSYVOICE_ENGINE)")
    common.add_argument(
        "--outputs-dir", type=Path, help="where each line's WAV and sidecar are saved (default: the app's outputs/)"
    )
    add_app_arguments(common)
    common.set_defaults(vocoder="torch", compute_units="ALL", random_weights=None)
    common.add_argument("--seed", type=int, help="seed of the first line (each next line adds 1)")
    add_post_arguments(common, "of every line")

    dialogue = commands.add_parser("dialogue", parents=[common], help="speak a script of several voices")
    dialogue.add_argument("script", type=Path, help="text file: '[S1] text' or 'Name: text' per line")
    dialogue.add_argument(
        "--cast",
        action="append",
        default=[],
        metavar="TAG=VOICE",
        help="map a speaker tag to a saved voice (a tag that is a voice's name needs none)",
    )
    dialogue.add_argument("--pause", type=float, default=0.4, help="seconds of silence between lines")
    dialogue.add_argument("--per-line", action="store_true", help="also write one WAV per line")
    dialogue.add_argument("--out", type=Path, required=True, help="output stem: writes OUT.wav and OUT.timing.json")
    dialogue.set_defaults(handler=_dialogue)

    dub = commands.add_parser("dub", parents=[common], help="dub an .srt subtitle file on its timeline")
    dub.add_argument("subtitles", type=Path)
    dub.add_argument("--voice", required=True, help="saved voice that speaks every cue")
    dub.add_argument("--speed-limit", type=float, default=1.5, help="speed a cue up at most this much (1-2)")
    dub.add_argument("--out", type=Path, required=True, help="output stem: writes OUT.wav and OUT.report.json")
    dub.set_defaults(handler=_dub)

    batch = commands.add_parser("batch", parents=[common], help="one WAV per line of a .txt or .csv")
    batch.add_argument("lines", type=Path)
    batch.add_argument("--voice", help="saved voice for lines that name none")
    batch.add_argument("--out-dir", type=Path, required=True, help="folder for the WAVs (a re-run resumes it)")
    batch.set_defaults(handler=_batch)

    voices = commands.add_parser("voices", help="list saved voices, or save a recording as a voice")
    voices.add_argument("action", choices=("list", "add"))
    voices.add_argument("name", nargs="?", help="name of the voice to add")
    voices.add_argument("--audio", type=Path, help="3-30 s recording of the voice (for add)")
    voices.add_argument("--transcript", help="what the recording says (zero-shot mode)")
    voices.set_defaults(handler=_voices)

    glossary = commands.add_parser("glossary", help="list, import or export the pronunciation glossary")
    glossary.add_argument("action", choices=("list", "import", "export"))
    glossary.add_argument("file", type=Path, nargs="?", help="CSV (key,replacement,language) to import or export")
    glossary.set_defaults(handler=_glossary)


def _store():
    from cosyvoice_mac.frontend.glossary import glossary_store

    return glossary_store()


def _glossary(args) -> int:
    from cosyvoice_mac.frontend.glossary import entries_from_csv, entries_to_csv

    store = _store()
    if args.action == "list":
        for entry in store.entries():
            print(f"{entry.language}\t{entry.key}\t{entry.replacement}")
        return 0
    if args.file is None:
        raise LongformError(f"glossary {args.action} needs a CSV file")
    if args.action == "import":
        entries = store.replace(entries_from_csv(_read_bytes(args.file)))
        print(f"imported {len(entries)} entries")
    else:
        args.file.write_text(entries_to_csv(store.entries()), encoding="utf-8")
        print(f"wrote {args.file}")
    return 0


def _voices(args) -> int:
    from cosyvoice_mac.engine.voice_library import VoiceLibrary
    from cosyvoice_mac.frontend.prompt_audio import decode_prompt

    library = VoiceLibrary()
    if args.action == "list":
        for entry in library.list():
            print(f"{entry['name']}\t{entry.get('transcript') or '(no transcript)'}")
        return 0
    if not args.name or args.audio is None:
        raise LongformError("voices add needs a NAME and --audio FILE")
    _read_bytes(args.audio)
    decoded = decode_prompt(str(args.audio))  # refuses what is not usable speech audio, with the reason
    entry = library.save(
        args.name,
        audio_hash=decoded.content_hash,
        model_id="recording",
        transcript=(args.transcript or "").strip() or None,
        audio=args.audio,
    )
    print(f"saved voice {entry['name']!r}")
    return 0


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise LongformError(f"{path} does not exist")
    return path.read_bytes()


def _check_voice(name: str | None) -> None:
    """Refuse an unknown saved voice before the model loads."""
    if name is not None:
        from cosyvoice_mac.engine.voice_library import VoiceLibrary

        VoiceLibrary().get(name)


def _speak(args, label: str, here, in_app) -> int:
    """The job in the running app (``in_app(app, on_progress)``, see ``remote``) when one answers, else with
    the app's engine started here (``here(speak, on_progress, should_stop)``, after ``here.check()``)."""
    from cosyvoice_mac.cli.remote import connect, note_local_only

    app = connect(args)
    if app is None:
        return _speak_here(args, label, here)
    try:
        note_local_only(args, {"--model": ("model", None), **LOCAL_ONLY})
        print(f"sent to the app at {app.url}; its lines wait in its queue", file=sys.stderr)
        return _run(lambda bar, stop: in_app(app, bar), label, None)
    finally:
        app.close()


def _speak_here(args, label: str, here) -> int:
    from cosyvoice_mac.cli.local import start_engine
    from cosyvoice_mac.longform.speakers import EngineSpeak

    here.check()  # saved voices this machine knows, before the model loads
    if args.outputs_dir is not None:
        outputs = args.outputs_dir
    else:
        from cosyvoice_mac.paths import default_outputs_dir

        outputs = default_outputs_dir()
    glossary = _store().entries()  # the worker applies it; here it only keys a batch's resume
    engine = start_engine(args, Path(outputs).expanduser(), args.models_dir)
    try:
        speak = EngineSpeak(engine, glossary, here.default_voice, interface="cli", timeout_s=None)
        return _run(lambda bar, stop: here(speak, bar, stop), label, speak.stop)
    finally:
        engine.close()


class _Here:
    """A job for the local engine: ``run(speak, on_progress, should_stop)``, what it checks first, its voice."""

    def __init__(self, run, check=lambda: None, default_voice: str | None = None):
        self.run, self.check, self.default_voice = run, check, default_voice

    def __call__(self, speak, on_progress, should_stop):
        return self.run(speak, on_progress, should_stop)


class _Bar:
    """A tqdm bar fed by the runner's progress reports."""

    def __init__(self, total_label: str):
        from tqdm import tqdm

        self.bar, self.label = None, total_label
        self._tqdm = tqdm

    def __call__(self, progress) -> None:
        if self.bar is None:
            self.bar = self._tqdm(total=progress.total, unit=progress.label, file=sys.stderr)
        self.bar.update(progress.done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _run(job, label: str, cancel_current) -> int:
    """``job(on_progress, should_stop)`` with a bar. With ``cancel_current``, the first Ctrl-C asks the job
    to stop and calls it (on a thread of its own: the handler may interrupt the code it would wait for);
    without, Ctrl-C ends the job where it is (the app's job: the connection closes and the app stops it)."""

    bar, stop = _Bar(label), threading.Event()

    def interrupted(signum, frame):
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        print(f"\nstopping: the {label[:-1]} in progress is cancelled, finished ones are kept", file=sys.stderr)
        threading.Thread(target=cancel_current, name="cosyvoice-cli-cancel", daemon=True).start()

    previous = signal.signal(signal.SIGINT, interrupted) if cancel_current else None
    try:
        result = job(bar, stop.is_set)
    except KeyboardInterrupt:
        bar.close()
        where = "" if cancel_current else ": the app stops the job and keeps what it finished in its outputs/longform"
        print(f"\ncancelled (Ctrl-C){where}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        bar.close()
    files = ", ".join(str(path) for path in result.files)
    print(f"{result.done}/{result.total} {label} done{' (stopped: partial)' if result.stopped else ''}: {files}")
    for misfit in result.report if result.kind == "dub" else ():
        print(
            f"cue {misfit['cue']}: {misfit['overrun']:.2f} s too long, starts {misfit['late']:.2f} s late",
            file=sys.stderr,
        )
    return EXIT_INTERRUPTED if result.stopped else 0


def _dialogue(args) -> int:
    from cosyvoice_mac.cli.remote_longform import dialogue_in_app
    from cosyvoice_mac.engine.voice_library import VoiceLibrary
    from cosyvoice_mac.longform import dialogue
    from cosyvoice_mac.longform.runner import run_dialogue

    script = _read_bytes(args.script).decode("utf-8-sig")
    cast = dict(pair.split("=", 1) for pair in args.cast if "=" in pair)
    if len(cast) != len(args.cast):
        raise LongformError("--cast takes TAG=VOICE, e.g. --cast S1=Anna")
    lines = dialogue.parse_script(script)
    post = post_settings(args)
    known = []

    def check():
        known.extend(entry["name"] for entry in VoiceLibrary().list())
        dialogue.check_cast(lines, cast, known)

    body = {"script": script, "cast": cast, "pause_s": args.pause, "per_line_files": args.per_line, "seed": args.seed}
    return _speak(
        args,
        "lines",
        _Here(
            lambda speak, bar, stop: run_dialogue(
                script,
                cast,
                known,
                speak,
                args.out,
                pause_s=args.pause,
                seed=args.seed,
                per_line_files=args.per_line,
                post=post,
                on_progress=bar,
                should_stop=stop,
            ),
            check,
        ),
        lambda app, bar: dialogue_in_app(app, {**body, **_post_fields(post)}, args.out, bar),
    )


def _post_fields(post: PostSettings) -> dict:
    return {"trim": post.trim, "loudness_lufs": post.loudness_lufs}


def _dub(args) -> int:
    from cosyvoice_mac.cli.remote_longform import dub_in_app
    from cosyvoice_mac.longform import subtitles
    from cosyvoice_mac.longform.runner import run_dub

    data = _read_bytes(args.subtitles)
    subtitles.parse_srt(data)
    subtitles.check_speed_limit(args.speed_limit)
    post = post_settings(args)
    # a cue keeps its silence (its place on the timeline): the route takes only the loudness
    form = {"voice": args.voice, "speed_limit": args.speed_limit, "seed": args.seed, "loudness_lufs": args.loudness}
    return _speak(
        args,
        "cues",
        _Here(
            lambda speak, bar, stop: run_dub(
                data,
                args.voice,
                speak,
                args.out,
                speed_limit=args.speed_limit,
                seed=args.seed,
                post=post,
                on_progress=bar,
                should_stop=stop,
            ),
            lambda: _check_voice(args.voice),
            args.voice,
        ),
        lambda app, bar: dub_in_app(app, data, form, args.out, bar),
    )


def _batch(args) -> int:
    from cosyvoice_mac.cli.remote_longform import batch_in_app
    from cosyvoice_mac.longform import batch
    from cosyvoice_mac.longform.runner import run_batch

    data = _read_bytes(args.lines)
    kind = args.lines.suffix.lower().lstrip(".")
    batch.parse_batch(data, kind)
    post = post_settings(args)
    form = {"voice": args.voice, "seed": args.seed, **_post_fields(post)}
    return _speak(
        args,
        "lines",
        _Here(
            lambda speak, bar, stop: run_batch(
                data,
                kind,
                args.out_dir,
                speak,
                voice=args.voice,
                settings={"model": str(args.model), "glossary": [entry.key for entry in speak.glossary]},
                seed=args.seed,
                post=post,
                on_progress=bar,
                should_stop=stop,
            ),
            lambda: _check_voice(args.voice),
            args.voice,
        ),
        lambda app, bar: batch_in_app(app, data, kind, form, args.out_dir, bar),
    )
