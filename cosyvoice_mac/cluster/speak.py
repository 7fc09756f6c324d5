"""A long job's ``Speak`` on the cluster (``longform.runner``'s runners take it as they take ``EngineSpeak``):
the lines the runner announces (``ahead``) go to the workers at once, in groups; each line it asks for is
waited for in turn and saved here, in this machine's outputs/, with a sidecar that names the machine that
made it. The runner keeps the rest as in a local run: the manifest, the resume rule, the zip, the report.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Sequence

import numpy as np

from cosyvoice_mac.cluster.dispatch import Dispatcher
from cosyvoice_mac.cluster.pool import WorkerPool
from cosyvoice_mac.cluster.wire import LineFailed, LineMade, SourceParcel, VoiceParcel
from cosyvoice_mac.conversion_request import ConversionRequest
from cosyvoice_mac.engine.jobs import Job, JobCancelled, JobFailed
from cosyvoice_mac.engine.messages import Cancelled
from cosyvoice_mac.engine.outputs import OutputWriteError, write_output
from cosyvoice_mac.engine.voice_library import VoiceLibrary
from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.longform.convert_batch import SourceLine
from cosyvoice_mac.longform.lines import LineRequest, Spoken
from cosyvoice_mac.longform.speakers import VoiceUnusable
from cosyvoice_mac.pipeline.takes.retake import CHECK_NOTE_STARTS
from cosyvoice_mac.request import Voice


def voice_parcel(entry: dict) -> VoiceParcel:
    """A saved voice (its library entry) as it travels: the recording's bytes, never its path here."""
    path = entry.get("audio_path")
    if not path or not Path(path).is_file():
        raise VoiceUnusable(
            f"the saved voice {entry['name']!r} has no stored recording, so it cannot be sent to the cluster's "
            "workers; save it again from its recording"
        )
    return VoiceParcel(
        entry["name"],
        Path(path).read_bytes(),
        Path(path).suffix.lower() or ".wav",
        entry.get("transcript"),
        entry["audio_hash"],
        entry.get("model_id"),
    )


class ClusterSpeak:
    """Owns one long job on the cluster: its jobs by line (announced, not yet asked for), the voices sent to
    the workers, and where its lines are saved (``outputs_dir``, None: nowhere but the job's own files).
    ``glossary`` (the driver's, sent to every worker when the pool opened) keys a batch's resume."""

    def __init__(
        self,
        pool: WorkerPool,
        outputs_dir: Path | None,
        glossary=(),
        default_voice: str | None = None,
        interface: str = "cli",
        library: VoiceLibrary | None = None,
        check: bool | None = None,
    ):
        self.pool, self.outputs_dir, self.glossary = pool, outputs_dir, tuple(glossary)
        self.default_voice, self.interface = default_voice, interface
        self.check = check  # the take check for every line, on its worker: None follows the workers' switch
        self.library = library or VoiceLibrary()
        self.dispatch = Dispatcher(pool)
        self._announced: dict[LineRequest, deque[Job]] = {}
        self._sent_voices: set[str] = set()

    def prepare(self, voices) -> None:
        """Send every saved voice of ``voices`` ((voice, style) pairs; None: the default voice, its own recording)
        to every worker, which makes its features ready for its model: VoiceUnusable names each voice a worker
        cannot use, or a style, before any line (a worker gets each voice's own recording only)."""
        pairs = [(voice or self.default_voice, style) for voice, style in voices]
        styled = [(name, style) for name, style in pairs if style]
        if styled:
            name, style = styled[0]
            raise VoiceUnusable(
                f"the {style!r} recording of {name!r} cannot be spoken on the cluster: its workers get each voice's "
                "own recording only; run this job without --cluster, or leave out the style"
            )
        names = [name for name in dict.fromkeys(name for name, _ in pairs) if name]
        parcels = [voice_parcel(self.library.get(name)) for name in names if name not in self._sent_voices]
        if not parcels:
            return
        refused = self.pool.take_voices(parcels)
        if refused:
            said = "; ".join(f"{name!r} ({', '.join(why)})" for name, why in refused.items())
            raise VoiceUnusable(f"a worker of the cluster cannot use the saved voice {said}")
        self._sent_voices.update(parcel.name for parcel in parcels)

    def styles(self, voice: str | None) -> tuple[str, ...]:
        """None: a worker speaks each voice's own recording (``prepare`` refuses a style by name)."""
        return ()

    def ahead(self, lines: Sequence[LineRequest]) -> None:
        """The lines the job will ask for, in order: sent to the workers now. None: the job is over, and what
        was sent and not asked for is dropped or cancelled."""
        if not lines:
            self._announced.clear()
            self.dispatch.forget()
            return
        jobs = []
        for line in lines:
            try:
                job = self._job(line)
            except CosyVoiceError:  # a line no request can hold: it fails in its turn, as in a local run
                continue
            self._announced.setdefault(line, deque()).append(job)
            jobs.append(job)
        self.dispatch.send(jobs)

    def __call__(self, line: LineRequest) -> Spoken:
        announced = self._announced.get(line)
        if announced:
            job = announced.popleft()
        else:  # asked out of turn (a dub's faster retake): ahead of the waiting groups
            job = self._job(line)
            self.dispatch.send([job], first=True)
        return self._spoken(job)

    def convert_ahead(self, lines: Sequence[SourceLine]) -> None:
        """``ahead`` for a batch of recordings to convert (``run_convert_batch``'s): each recording travels with
        its job, as its bytes."""
        if not lines:
            self.ahead(())
            return
        jobs, sources = [], {}
        for line in lines:
            try:
                job, parcel = self._conversion(line)
            except CosyVoiceError:  # refused in its turn, as in a local run
                continue
            self._announced.setdefault(line, deque()).append(job)
            jobs.append(job)
            sources[job.job_id] = parcel
        self.dispatch.send(jobs, sources=sources)

    def convert(self, line: SourceLine) -> Spoken:
        """Re-speak ``line.source`` in its saved voice (the default, else the backend's own) on a worker."""
        announced = self._announced.get(line)
        if announced:
            job = announced.popleft()
        else:
            job, parcel = self._conversion(line)
            self.dispatch.send([job], first=True, sources={job.job_id: parcel})
        return self._spoken(job)

    def stop(self) -> None:
        """Ctrl-C: every worker cancels its lines; the line waited for ends at once."""
        self.dispatch.stop()

    def _voice(self, name: str | None) -> Voice:
        name = name or self.default_voice
        if not name:
            return Voice.builtin()
        entry = self.library.get(name)
        return Voice.saved_voice(entry["name"], transcript=entry.get("transcript"))

    def _job(self, line: LineRequest) -> Job:
        return Job(line.request(self._voice(line.voice), self.check), interface=self.interface)

    def _conversion(self, line: SourceLine) -> tuple[Job, SourceParcel]:
        request = ConversionRequest.build(str(line.source), self._voice(line.voice), speed=line.speed)
        source = Path(line.source)
        return Job(request, interface=self.interface), SourceParcel(source.name, source.read_bytes())

    def _spoken(self, job: Job) -> Spoken:
        """Wait for ``job``'s outcome: the line saved here, or JobFailed / JobCancelled with the worker's event."""
        outcome = self.dispatch.outcome(job.job_id)
        if isinstance(outcome, LineFailed):
            raise (JobCancelled if isinstance(outcome.event, Cancelled) else JobFailed)(outcome.event)
        return self._saved(job, outcome)

    def _saved(self, job: Job, made: LineMade) -> Spoken:
        """The line saved in outputs/ with its worker's facts and the machine that made it, as a Spoken."""
        worker = next(worker for worker in self.pool.workers if worker.name == made.worker)
        facts = {**made.facts, "machine": worker.facts.host, "cluster_worker": made.worker}
        line_output, not_saved = None, None
        if self.outputs_dir is not None:
            try:
                saved = write_output(self.outputs_dir, job.job_id, made.samples, made.sample_rate, facts)
                line_output = str(saved.wav_path)
            except OutputWriteError as error:
                not_saved = str(error)
        converted = {key: facts[key] for key in ("source_hash", "source_duration_s") if key in facts}
        check = facts.get("check") if isinstance(facts.get("check"), dict) else {}
        return Spoken(
            np.array(made.samples, dtype=np.float32),  # Ray's copy is a read-only view of its object store
            made.sample_rate,
            {
                "seed": facts.get("seed"),
                "model": facts.get("model"),
                "line_output": line_output,
                "not_saved": not_saved,
                "interface": self.interface,
                "machine": worker.facts.host,
                "cluster_worker": made.worker,
                **converted,  # a conversion's recording: its hash and length, as a local run says them
                "check": check.get("status"),  # passed, retaken, flagged; None: not checked
                "check_notes": [note for note in facts.get("notes") or () if note.startswith(CHECK_NOTE_STARTS)],
            },
            facts.get("words"),
        )

    def summary(self) -> list[str]:
        """What the job's report says of the cluster: the lines each worker made, and each worker lost."""
        made = self.dispatch.made
        said = [f"{worker.facts.describe()}: {_lines(made.get(worker.name, 0))}" for worker in self.pool.workers]
        for lost in self.dispatch.lost.values():
            said.append(f"lost {lost.name} ({lost.reason}): its {_lines(lost.lines_resent)} went to the others")
        return said


def _lines(count: int) -> str:
    return f"{count} line{'' if count == 1 else 's'}"
