"""``synth`` without the app: the app's own Engine (a model worker process behind its job queue) in this process.

The job is the one the page would queue (``Job(request, interface="cli")``), so the worker applies the
glossary, saves the WAV and its sidecar in outputs/ (recording ``interface: cli``), and the result is copied
to ``--out``. Ctrl-C cancels the job and stops the worker.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from cosyvoice_mac.cli.common import (
    CONTRACT_FLAGS,
    EXIT_INTERRUPTED,
    EXIT_NOT_SAVED,
    EXIT_TRY_LATER,
    CommandFailed,
    exit_code_for_fault,
)
from cosyvoice_mac.cli.takes import say_check, write_captions_beside
from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.pipeline.takes.retake import CHECK_NOTE_STARTS
from cosyvoice_mac.preview import PREVIEW
from cosyvoice_mac.preview.labels import PREVIEW_LABEL

RANDOM_WEIGHTS_FACTORY = "cosyvoice_mac.cli.local:random_full_size"
CANCEL_WAIT_S = 15.0  # a running job stops at its next sentence or chunk


def random_full_size(version: str, *, device, dtype, **options):
    """The worker's pipeline factory for ``--random-weights VERSION``: the full-size architecture, random weights."""
    from cosyvoice_mac.pipeline import CosyVoice

    return CosyVoice.random_full_size(version, device=device, dtype=dtype, **options)


def worker_config(args, outputs_dir: Path, models_dir: Path | None = None):
    """The worker settings for the CLI's arguments, by the app's own rule (``ModelHost.worker_config``);
    ``models_dir`` is where a model named by folder name (or picked by default) is looked for."""
    from cosyvoice_mac.cli.common import host_precision, host_vocoder
    from cosyvoice_mac.engine.host import PREVIEW_CHOICE, HostConfig, ModelChoice, ModelHost
    from cosyvoice_mac.load import resolve_model
    from cosyvoice_mac.mlx import requested_engine

    settings = HostConfig(
        models_dir=Path("."),  # unused: the model was resolved below
        outputs_dir=outputs_dir,
        device=args.device,
        dtype=args.dtype,
        vocoder=host_vocoder(args),
        precision=host_precision(args),
        engine=requested_engine(args.engine),  # --engine, else $COSYVOICE_ENGINE, else auto
        preview=True,
    )
    app_worker_config = ModelHost(settings).worker_config
    if args.random_weights is not None:
        print(f"warning: {args.random_weights} with RANDOM weights: the output is noise", file=sys.stderr)
        choice = ModelChoice(args.random_weights, Path(args.random_weights), args.random_weights)
        return replace(
            app_worker_config(choice),
            model_dir=args.random_weights,
            pipeline_factory=RANDOM_WEIGHTS_FACTORY,
        )
    folder = resolve_model(args.model, models_dir)
    if folder is None:
        return app_worker_config(PREVIEW_CHOICE)
    from cosyvoice_mac.pipeline.model_dir import detect_version

    version = detect_version(folder)  # a folder that is no model is refused now, with how to get one
    return app_worker_config(ModelChoice(folder.name, folder, version))


def start_engine(args, outputs_dir: Path, models_dir: Path | None = None):
    """The app's Engine for the CLI's arguments, started and its model loaded (said on stderr); the caller
    closes it. CosyVoiceError (the engine closed again) when the model does not start."""
    from cosyvoice_mac.engine import Engine

    config = worker_config(args, outputs_dir, models_dir)
    started = time.perf_counter()
    engine = Engine(config, max_queue=1, max_load_failures=1, job_timeout_s=None)
    try:
        if not engine.start(wait=True):
            raise CosyVoiceError(engine.status().get("last_error") or "the model did not start")
    except BaseException:
        engine.close()
        raise
    _say_loaded(engine.status(), time.perf_counter() - started, args)
    return engine


def synth_locally(args, request, outputs_dir: Path) -> int:
    """Start the engine, run the one job, copy its WAV to ``args.out``; the exit code."""
    from cosyvoice_mac.engine import Job

    job = Job(request, interface="cli")
    try:
        engine = start_engine(args, outputs_dir)
    except KeyboardInterrupt:
        print("cancelled (Ctrl-C): the job was stopped and nothing was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    try:
        result = _run(engine, job, args.stream)
    except KeyboardInterrupt:
        _cancel(engine, job.job_id)
        print("cancelled (Ctrl-C): the job was stopped and nothing was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        engine.close()
    code = _deliver(result, args.out)
    check_notes = [note for note in result.notes if note.startswith(CHECK_NOTE_STARTS)]
    say_check(result.check_status, check_notes)
    write_captions_beside(args.out, result.words, getattr(args, "captions", None))  # convert has no --captions
    return code


def _say_loaded(status: dict, seconds: float, args) -> None:
    print(f"loaded {status.get('model')} on {status.get('device')} in {seconds:.1f} s", file=sys.stderr)
    if status.get("version") == PREVIEW:
        print(f"note: {PREVIEW_LABEL} (no CosyVoice model folder in models/)", file=sys.stderr)
    if status.get("engine"):  # the preview voice has none
        reason = status.get("engine_reason")
        print(f"engine: {status['engine']}" + (f" ({reason})" if reason else ""), file=sys.stderr)
    reasons = [pick.get("reason") for pick in (status.get("precision") or {}).values() if isinstance(pick, dict)]
    reasons = [reason for reason in reasons if reason]
    if reasons:
        print(f"precision: {'; '.join(reasons)}", file=sys.stderr)
    if args.vocoder == "coreml":
        vocoder = status.get("vocoder") or "torch"
        reason = status.get("vocoder_reason")
        print(f"vocoder: {vocoder if reason is None else 'torch, because ' + reason}", file=sys.stderr)


def _run(engine, job, stream: bool):
    """Submit the job and follow it to its end, saying each sentence; its JobResult."""
    from cosyvoice_mac.engine.messages import Done, Failed, Progress

    clock = time.perf_counter()
    heard = False
    with engine.subscribe() as feed:
        engine.submit(job)
        for event in feed.of(job.job_id):
            if isinstance(event, Progress):
                if stream and not heard and event.audio is not None:
                    heard = True
                    print(f"first audio after {time.perf_counter() - clock:.2f} s", file=sys.stderr)
                if event.is_final_chunk:
                    print(f"[{event.segment_index + 1}/{event.segment_count}] {event.text}", file=sys.stderr)
            elif isinstance(event, Done):
                return event.result
            elif isinstance(event, Failed):
                raise _job_failure(event)
            elif event.terminal:
                raise CommandFailed(event.message, EXIT_TRY_LATER)  # cancelled by a restart of the engine
    raise CosyVoiceError("the job ended without a result")


def _job_failure(failed) -> CommandFailed:
    """A failed job of this process's engine as the command's error: the flag to change for an input fault,
    the crash for a model process that died (the same command then works again)."""
    from cosyvoice_mac.engine.messages import Fault

    exit_code = exit_code_for_fault(failed.fault)
    if failed.fault == Fault.INPUT:
        flag = CONTRACT_FLAGS.get(failed.field or "")
        return CommandFailed(f"{flag + ': ' if flag else ''}{failed.message}", exit_code)
    if failed.fault == Fault.RESTARTED:
        return CommandFailed(
            f"the model process crashed while it ran this job ({failed.message}); run it again", exit_code
        )
    return CommandFailed(f"the model failed on this job: {failed.message}", exit_code)


def _cancel(engine, job_id: str) -> None:
    """Cancel the job (if it was queued at all) and give it a moment to stop at its next sentence."""
    from cosyvoice_mac.engine import EngineError

    try:
        if engine.cancel(job_id):
            engine.result(job_id, timeout=CANCEL_WAIT_S)
    except (EngineError, TimeoutError):  # cancelled (the expected end), never queued, or slow: close() stops it
        pass


def _deliver(result, out: Path) -> int:
    """Copy the saved WAV to ``out`` (or, when outputs/ could not take it, write the samples there with their
    content credentials, as the page's and the API's copies of an unsaved result carry them)."""
    for note in result.notes:
        if not note.startswith(CHECK_NOTE_STARTS):  # the check's notes are said once, after the file is written
            print(f"note: {note}", file=sys.stderr)
    out = Path(out)
    if result.output_path:
        out.parent.mkdir(parents=True, exist_ok=True)
        if Path(result.output_path).resolve() != out.resolve():
            shutil.copyfile(result.output_path, out)
        saved = f"; saved in outputs as {Path(result.output_path).name} with its sidecar"
    else:
        from cosyvoice_mac.engine.outputs import signed_wav
        from cosyvoice_mac.paths import atomic_write

        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, signed_wav(result, out.name))
        saved = ""
    seconds = result.timings.get("synthesis") or result.timings.get("total") or 0.0
    rtf = f", RTF {seconds / result.duration_s:.2f}" if result.duration_s else ""
    print(f"wrote {out} ({result.duration_s:.2f} s, seed {result.seed}{rtf}){saved}")
    if not result.output_path:
        print(f"warning: made, but not saved in outputs: {result.output_error}", file=sys.stderr)
        return EXIT_NOT_SAVED
    return 0
