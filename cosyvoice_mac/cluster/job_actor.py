"""Inside a Ray actor: the jobs of the app's queue (``queue_worker.ClusterWorker`` sends them), run by this
machine's ``WorkerRuntime`` exactly as the app's own worker process runs them, their events streamed back as
they come (Ray streams what :meth:`JobWorker.run` yields), so Progress and streamed audio reach the app's doors
as they do from a local worker.

A job's files (an uploaded prompt, a saved voice's recordings, a recording to convert) come as their bytes and
are kept in this worker's scratch folder under their hash; a finished job's audio goes back as samples with its
sidecar facts, and only the app saves it. This module does not import Ray.
"""

from __future__ import annotations

import queue
import threading
import traceback
from dataclasses import replace
from functools import partial
from pathlib import Path

from cosyvoice_mac.cluster.actor import JobGlossary, LineWorker, taken_from_scratch
from cosyvoice_mac.cluster.wire import FileParcel, JobMade, RunParcel
from cosyvoice_mac.engine.jobs import Job, Task
from cosyvoice_mac.engine.messages import Done, Failed, Fault, TaskError
from cosyvoice_mac.engine.qos import set_worker_thread_qos

_END = object()  # the runs of one command have all ended


def land(value, folder: Path):
    """``value`` (a voice entry, a task's args: dicts and lists) with each FileParcel written in ``folder`` (once:
    named by its hash) and replaced by its path there."""
    if isinstance(value, FileParcel):
        path = folder / value.digest / value.name
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(value.data)
        return str(path)
    if isinstance(value, dict):
        return {key: land(item, folder) for key, item in value.items()}
    if isinstance(value, list):
        return [land(item, folder) for item in value]
    return value


def job_here(job: Job, files: dict[str, FileParcel], folder: Path) -> Job:
    """``job`` with the files it names (its voice's recording, the recording it converts) on this machine's disk."""
    request = job.request
    voice = request.voice
    if voice.audio in files:
        request = replace(request, voice=replace(voice, audio=land(files[voice.audio], folder)))
    source = getattr(request, "source", None)
    if source is not None and source.audio in files:
        request = replace(request, source=replace(source, audio=land(files[source.audio], folder)))
    return replace(job, request=request)


class JobWorker(LineWorker):
    """A LineWorker (checked, loaded and closed as one: ``pool.WorkerPool``) that also runs the jobs of the app's
    queue: one command at a time (a job, or a batch spoken together), while ``stop`` cancels by sequence number
    beside it. ``cache_dir``: the speaker cache's folder (the app's own when the cluster runs on its computer)."""

    def __init__(self, slot: int, slots_here: int, cache_dir: str | None = None):
        super().__init__(slot, slots_here)
        self.cache_dir = cache_dir

    def status(self):
        """This worker's ``WorkerStatus`` (its model, device, engine, memory), as the app's status panel shows it."""
        with self._one_group:
            return self.runtime.status()

    def run(self, runs: list[RunParcel], glossary: tuple):
        """Run one command (one job, or several spoken together) and yield its events as they come: Started,
        Progress, Retrying, and each job's terminal one, a Done as a JobMade (the samples with it)."""
        events: queue.Queue = queue.Queue()
        threading.Thread(target=self._run, args=(runs, glossary, events.put), daemon=True).start()
        ended = set()
        while (event := events.get()) is not _END:
            if getattr(event, "terminal", False):
                ended.add(event.job_id)
                if isinstance(event, Done):
                    event = self._made(event)
            yield event
        for run in runs:  # a job the engine ended without a word (it never does: a bug) fails, and says so
            if run.job.job_id not in ended:
                yield Failed(run.job.job_id, f"the worker {self.facts.name} ended this job without a result")

    def task(self, task: Task):
        """Do one Task (a prompt's features, saved voices made ready) with the files it names sent along: its
        TaskDone or TaskError."""
        answers = []
        with self._one_group:
            self.runtime.send = answers.append
            try:
                self.runtime.run_task(replace(task, args=land(task.args, self.scratch / "files")))
            finally:
                self.runtime.send = self._receive
        return answers[0] if answers else TaskError(task.task_id, "the worker gave no answer to the task")

    def _run(self, runs: list[RunParcel], glossary: tuple, put) -> None:
        from cosyvoice_mac.frontend.glossary import RequestGlossary

        try:
            with self._one_group:
                set_worker_thread_qos()
                self.cancelled.update(run.seq for run in runs if run.cancelled)
                self.runtime.send = put
                self.runtime.glossary = RequestGlossary(JobGlossary(glossary))  # the app's, as it is now
                try:
                    folder = self.scratch / "files"
                    jobs = [job_here(run.job, run.files, folder) for run in runs]
                    entries = [land(run.voice_entry, folder) for run in runs]
                    stops = [partial(self._stopped, run.seq) for run in runs]
                    if len(runs) == 1:
                        self.runtime.run(jobs[0], stops[0], entries[0])
                    else:
                        self.runtime.run_batch(jobs, stops, entries)
                finally:
                    self.runtime.send = self._receive
        except Exception as error:  # the worker's own code failed: every job of the command says so
            for run in runs:
                message = f"the worker {self.facts.name} failed on this job: {type(error).__name__}: {error}"
                put(Failed(run.job.job_id, message, traceback.format_exc(limit=8), fault=Fault.ENGINE))
        finally:
            put(_END)

    def _stopped(self, seq: int) -> bool:
        return seq in self.cancelled

    def _made(self, event: Done) -> JobMade:
        """A finished job as it travels: its samples in the result, its files here removed."""
        samples, facts = taken_from_scratch(event.result)
        result = replace(event.result, audio=samples, output_path=None, sidecar_path=None, captions=None)
        return JobMade(replace(event, result=result), facts)
