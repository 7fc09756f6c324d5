"""How the CLI runs one long job (``cli.longform``'s commands): in the running app when one answers, else with
the app's engine started here; a tqdm bar of its progress; Ctrl-C cancels the line in flight and keeps the
finished ones (a second Ctrl-C quits at once); the outcome printed, and the exit code it earns.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from cosyvoice_mac.cli.common import EXIT_INTERRUPTED, EXIT_NOT_SAVED, EXIT_REFUSED, local_only_flags


def speak_long_job(args, label: str, here, in_app) -> int:
    """The job in the running app (``in_app(app, on_progress)``, see ``remote``) when one answers, else with
    the app's engine started here (``here(speak, on_progress, should_stop)``, after ``here.check()``); on a
    Ray cluster's workers with ``--cluster`` (``cli.longform_cluster``)."""
    from cosyvoice_mac.cli.longform_cluster import cluster_address, cluster_speak
    from cosyvoice_mac.cli.remote import connect, note_local_only

    address = cluster_address(args)
    if address:
        with cluster_speak(args, here, address) as speak:
            return run_with_bar(lambda bar, stop: here(speak, bar, stop), label, speak.stop)
    app = connect(args)
    if app is None:
        return _speak_here(args, label, here)
    try:
        note_local_only(args, {"--model": ("model", None), **local_only_flags()})
        print(f"sent to the app at {app.url}; its lines wait in its queue", file=sys.stderr)
        return run_with_bar(lambda bar, stop: in_app(app, bar), label, None)
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
    from cosyvoice_mac.frontend.glossary import glossary_store

    glossary, note = glossary_store().usable_entries()  # the worker applies it; here it only keys a batch's resume
    if note:
        print(f"note: {note}", file=sys.stderr)
    engine = start_engine(args, Path(outputs).expanduser(), args.models_dir)
    try:
        check = False if args.no_check else None
        speak = EngineSpeak(engine, glossary, here.default_voice, interface="cli", timeout_s=None, check=check)
        return run_with_bar(lambda bar, stop: here(speak, bar, stop), label, speak.stop)
    finally:
        engine.close()


class HereJob:
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


def run_with_bar(job, label: str, cancel_current) -> int:
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
    failed = (
        [entry for entry in result.report if entry.get("status") == "failed"] if result.kind == "convert_batch" else []
    )
    for entry in result.report if result.kind == "convert_batch" else ():
        if entry["status"] in ("made", "skipped"):
            print(f"{entry['source']} -> {entry['file']}{' (already made)' if entry['status'] == 'skipped' else ''}")
        elif entry["status"] == "failed":
            print(f"{entry['source']}: not converted: {entry['reason']}", file=sys.stderr)
    if result.stopped:
        return EXIT_INTERRUPTED
    if result.retaken:
        print(f"made again with new seeds: {label} {', '.join(map(str, result.retaken))} (earlier takes kept)")
    for line in result.flagged:  # the best take is kept: a warning, not a failure
        print(f"warning: the take check flagged {line} (--retake makes the flagged {label} again)", file=sys.stderr)
    if result.not_saved:
        print(f"warning: made, but not saved in outputs: {result.not_saved}", file=sys.stderr)
        return EXIT_NOT_SAVED
    if failed:
        print(f"{len(failed)} of {result.total} recordings could not be converted (see above)", file=sys.stderr)
        return EXIT_REFUSED
    return 0
