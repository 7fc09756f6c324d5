"""Command line for long work: ``dialogue``, ``dub``, ``batch`` (lines, or a folder of recordings to convert)
and ``glossary`` (see ``--help`` of each).

Every line is an ordinary job of the app's engine (``cli.local``), recorded ``interface: cli`` in its
sidecar in outputs/, with the glossary applied by the worker and saved voices from the voice library (save
one on the page, or with ``python -m cosyvoice_mac voices add``). ``cli.longform_run`` runs each job: a tqdm
bar shows progress; Ctrl-C cancels the line in flight and keeps the finished ones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cosyvoice_mac.cli.common import (
    EXIT_CODES_HELP,
    add_app_arguments,
    add_model_arguments,
    add_post_arguments,
    post_settings,
)
from cosyvoice_mac.cli.longform_run import HereJob, speak_long_job
from cosyvoice_mac.longform import LongformError
from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.request import SAMPLING_FIELDS, PostSettings, Sampling
from cosyvoice_mac.settings import add_argument


def add_longform(commands) -> None:
    common = argparse.ArgumentParser(add_help=False)
    add_argument(common, "model")
    add_argument(common, "models_dir", help=argparse.SUPPRESS)
    add_model_arguments(common)
    add_argument(common, "outputs_dir")
    add_app_arguments(common)
    add_argument(common, "cluster")
    common.set_defaults(random_weights=None)
    add_argument(common, "seed", help="seed of the first line (each next line adds 1)")
    add_post_arguments(common)
    sampling = common.add_argument_group("sampling of every line (unset: the model's own)")
    for name in SAMPLING_FIELDS:
        add_argument(sampling, name)
    add_argument(common, "no_check")
    add_argument(common, "retake")

    dialogue = commands.add_parser(
        "dialogue", parents=[common], help="speak a script of several voices", epilog=EXIT_CODES_HELP
    )
    dialogue.add_argument("script", type=Path, help="text file: '[S1] text' or 'Name: text' per line")
    dialogue.add_argument(
        "--cast",
        action="append",
        default=[],
        metavar="TAG=VOICE",
        help="map a speaker tag to a saved voice (a tag that is a voice's name needs none)",
    )
    add_argument(dialogue, "pause")
    dialogue.add_argument("--per-line", action="store_true", help="also write one WAV per line")
    dialogue.add_argument("--out", type=Path, required=True, help="output stem: writes OUT.wav and OUT.timing.json")
    dialogue.set_defaults(handler=_dialogue)

    dub = commands.add_parser(
        "dub", parents=[common], help="dub an .srt subtitle file on its timeline", epilog=EXIT_CODES_HELP
    )
    dub.add_argument("subtitles", type=Path)
    dub.add_argument("--voice", required=True, help="saved voice that speaks every cue")
    dub.add_argument("--style", help="the voice's recording of this style (happy, whisper, ...); default its own")
    add_argument(dub, "speed_limit")
    dub.add_argument("--out", type=Path, required=True, help="output stem: writes OUT.wav and OUT.report.json")
    dub.set_defaults(handler=_dub)

    batch = commands.add_parser(
        "batch",
        parents=[common],
        help="one WAV per line of a .txt or .csv, or per recording of a folder (voice conversion)",
        description="LINES a .txt or .csv: one WAV per line. LINES a folder: every audio file in it (sorted by "
        "name; other files are skipped with a note) re-spoken in --voice, its words and timing kept; a recording "
        "that cannot be converted is reported with its reason and the others go on. A re-run resumes --out-dir.",
        epilog=EXIT_CODES_HELP,
    )
    batch.add_argument("lines", type=Path, help="a .txt or .csv of lines, or a folder of recordings to convert")
    batch.add_argument(
        "--voice", help="saved voice for lines that name none; for a folder, the voice to convert into ('preview')"
    )
    add_argument(batch, "speed", help="a folder's recordings only: 1 keeps their timing")
    batch.add_argument("--out-dir", type=Path, required=True, help="folder for the WAVs (a re-run resumes it)")
    batch.set_defaults(handler=_batch)

    glossary = commands.add_parser(
        "glossary",
        help="list, import or export the pronunciation glossary",
        description="List, import (replace) or export the pronunciation glossary: the running app's (--server, "
        "default as for synth), else this machine's (--local, or when no app answers).",
    )
    glossary.add_argument("action", choices=("list", "import", "export"))
    glossary.add_argument("file", type=Path, nargs="?", help="CSV (key,replacement,language) to import or export")
    add_app_arguments(glossary)
    glossary.set_defaults(handler=_glossary)


def _store():
    from cosyvoice_mac.frontend.glossary import glossary_store

    return glossary_store()


def _glossary(args) -> int:
    from cosyvoice_mac.cli.remote import connect
    from cosyvoice_mac.frontend.glossary import entries_from_csv, entries_to_csv

    if args.action != "list" and args.file is None:
        raise LongformError(f"glossary {args.action} needs a CSV file")
    imported = entries_from_csv(_read_bytes(args.file)) if args.action == "import" else None  # checked first
    app = connect(args)
    try:
        if app is not None:
            from cosyvoice_mac.cli.remote_glossary import glossary_in_app, replace_glossary_in_app

            read, replace, where = (lambda: glossary_in_app(app)), (lambda e: replace_glossary_in_app(app, e)), app.url
        else:
            store = _store()
            read, replace, where = store.entries, (lambda e: len(store.replace(e))), str(store.path)
        if args.action == "list":
            for entry in read():
                print(f"{entry.language}\t{entry.key}\t{entry.replacement}")
        elif args.action == "import":
            print(f"imported {replace(imported)} entries into the glossary of {where}")
        else:
            atomic_write(args.file, entries_to_csv(read()).encode("utf-8"))
            print(f"wrote {args.file} (the glossary of {where})")
    finally:
        if app is not None:
            app.close()
    return 0


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise LongformError(f"{path} does not exist")
    return path.read_bytes()


def _check_voice(name: str | None, style: str | None = None) -> None:
    """Refuse an unknown saved voice, or a style it has no recording of, before the model loads."""
    if name is not None:
        from cosyvoice_mac.engine.voice_library import VoiceLibrary

        VoiceLibrary().styled(name, style)


def _dialogue(args) -> int:
    from cosyvoice_mac.cli.remote_longform import dialogue_in_app
    from cosyvoice_mac.engine.voice_library import VoiceLibrary
    from cosyvoice_mac.longform import dialogue
    from cosyvoice_mac.longform.files import ResultFiles
    from cosyvoice_mac.longform.runner import run_dialogue

    script = _read_bytes(args.script).decode("utf-8-sig")
    cast = dict(pair.split("=", 1) for pair in args.cast if "=" in pair)
    if len(cast) != len(args.cast):
        raise LongformError("--cast takes TAG=VOICE, e.g. --cast S1=Anna")
    lines = dialogue.parse_script(script)
    post, sampling = post_settings(args), _sampling(args)
    known = []

    def check():
        known.extend(entry["name"] for entry in VoiceLibrary().list())
        dialogue.check_cast(lines, cast, known)

    body = {"script": script, "cast": cast, "pause_s": args.pause, "per_line_files": args.per_line, "seed": args.seed}
    body["check"] = False if args.no_check else None
    retake = _earlier_run(args)
    body["retake_from"] = retake.result if retake is not None else None
    return speak_long_job(
        args,
        "lines",
        HereJob(
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
                sampling=sampling,
                on_progress=bar,
                should_stop=stop,
                files=ResultFiles(replace=True),  # --out is the user's own name: a re-run replaces it
                retake=retake,
            ),
            check,
        ),
        lambda app, bar: dialogue_in_app(app, {**body, **_post_fields(post), **sampling.given()}, args.out, bar),
    )


def _earlier_run(args):
    """With ``--retake``: the lines the run that wrote ``--out`` left flagged (its ``OUT.lines.json``), to make
    again; None without it."""
    if not args.retake:
        return None
    from cosyvoice_mac.longform.retakes import LINES_SUFFIX, Retake

    return Retake.flagged_of(args.out.with_suffix(LINES_SUFFIX))


def _post_fields(post: PostSettings) -> dict:
    return {"trim": post.trim, "loudness_lufs": post.loudness_lufs}


def _sampling(args) -> Sampling:
    """The sampling flags as the request contract's Sampling, checked before anything is sent or loaded."""
    return Sampling.build(**{name: getattr(args, name) for name in SAMPLING_FIELDS})


def _dub(args) -> int:
    from cosyvoice_mac.cli.remote_longform import dub_in_app
    from cosyvoice_mac.longform import subtitles
    from cosyvoice_mac.longform.files import ResultFiles
    from cosyvoice_mac.longform.runner import run_dub

    data = _read_bytes(args.subtitles)
    subtitles.parse_srt(data)
    subtitles.check_speed_limit(args.speed_limit)
    post, sampling = post_settings(args), _sampling(args)
    # a cue keeps its silence (its place on the timeline): the route takes only the loudness
    style = (args.style or "").strip() or None
    form = {"voice": args.voice, "speed_limit": args.speed_limit, "seed": args.seed, "loudness_lufs": args.loudness}
    form |= sampling.given()
    form |= {"style": style} if style else {}
    form["check"] = False if args.no_check else None
    retake = _earlier_run(args)
    form["retake_from"] = retake.result if retake is not None else None
    return speak_long_job(
        args,
        "cues",
        HereJob(
            lambda speak, bar, stop: run_dub(
                data,
                args.voice,
                speak,
                args.out,
                style=style,
                speed_limit=args.speed_limit,
                seed=args.seed,
                post=post,
                sampling=sampling,
                on_progress=bar,
                should_stop=stop,
                files=ResultFiles(replace=True),
                retake=retake,
            ),
            lambda: _check_voice(args.voice, style),
            args.voice,
        ),
        lambda app, bar: dub_in_app(app, data, form, args.out, bar),
    )


def _convert_batch(args) -> int:
    """A folder of recordings, each converted into ``--voice`` (see ``longform.convert_batch``)."""
    from cosyvoice_mac.cli.remote_longform import convert_batch_in_app
    from cosyvoice_mac.longform.convert_batch import plan_sources, run_convert_batch, sources_in_folder
    from cosyvoice_mac.preview import PREVIEW
    from cosyvoice_mac.request import check_speed

    if not args.voice:
        raise LongformError("converting a folder of recordings needs --voice: the saved voice to convert into")
    if args.retake:
        raise LongformError(
            "--retake is for lines to speak: a converted recording follows its recording, never retaken"
        )
    check_speed(args.speed, False)
    items, skipped = plan_sources(sources_in_folder(args.lines))
    for name in skipped:
        print(f"note: skipped {name}: not an audio file", file=sys.stderr)
    post = post_settings(args)
    voice = None if args.voice == PREVIEW else args.voice  # the preview's own voice: no saved voice is named
    form = {"voice": args.voice, "speed": args.speed, **_post_fields(post)}
    return speak_long_job(
        args,
        "files",
        HereJob(
            lambda speak, bar, stop: run_convert_batch(
                items,
                skipped,
                args.out_dir,
                speak.convert,
                voice=voice,
                speed=args.speed,
                settings={"model": str(args.model)},
                post=post,
                on_progress=bar,
                should_stop=stop,
                prepare=speak.prepare,
                ahead=getattr(speak, "convert_ahead", None),  # a cluster's workers start on every recording at once
            ),
            lambda: _check_voice(voice),
            voice,
        ),
        lambda app, bar: convert_batch_in_app(app, items, skipped, form, args.out_dir, bar),
    )


def _batch(args) -> int:
    if args.lines.is_dir():
        return _convert_batch(args)
    if args.speed != 1.0:
        raise LongformError("--speed is for a folder of recordings to convert; lines are spoken at their own speed")
    from cosyvoice_mac.cli.remote_longform import batch_in_app
    from cosyvoice_mac.longform import batch
    from cosyvoice_mac.longform.runner import run_batch

    data = _read_bytes(args.lines)
    kind = args.lines.suffix.lower().lstrip(".")
    batch.parse_batch(data, kind)
    post, sampling = post_settings(args), _sampling(args)
    form = {"voice": args.voice, "seed": args.seed, **_post_fields(post), **sampling.given()}
    form["check"] = False if args.no_check else None
    form["retake"] = args.retake
    return speak_long_job(
        args,
        "lines",
        HereJob(
            lambda speak, bar, stop: run_batch(
                data,
                kind,
                args.out_dir,
                speak,
                voice=args.voice,
                settings={"model": str(args.model), "glossary": [entry.key for entry in speak.glossary]},
                seed=args.seed,
                post=post,
                sampling=sampling,
                on_progress=bar,
                should_stop=stop,
                retake_flagged=args.retake,
            ),
            lambda: _check_voice(args.voice),
            args.voice,
        ),
        lambda app, bar: batch_in_app(app, data, kind, form, args.out_dir, bar),
    )
