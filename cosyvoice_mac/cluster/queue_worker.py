"""The app's queue on a Ray cluster (``bash run.sh --cluster ADDRESS``): :class:`ClusterWorker` stands in for the
engine's worker process (the same ``send``, ``receive``, ``cancel``, ``alive`` and ``stop``), so the app keeps its
one queue, its rules (fairness between doors, the bound, cancel, restarts) and its supervisor, while the jobs run
on the cluster's workers (``job_actor.JobWorker``: this app's own worker code, with the model built for each
machine). Unlike a worker process it runs several jobs at once: one command (a job, or a batch) per worker, the
next job going to a worker with room.

Each command's events stream back as the worker makes them (Started, Progress with streamed audio, the end),
and this process saves each finished job in its outputs/ with its sidecar, which names the machine. A worker
lost mid-job: its jobs run once more on another worker (unless streamed audio already went out), or fail with
a message that says so; never silently lost. Every worker lost: the engine restarts it, as it restarts a
worker process that died (new actors on the slots the cluster has then).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field, replace

import numpy as np

from cosyvoice_mac.cluster import ClusterError, said_by
from cosyvoice_mac.cluster.job_actor import JobWorker
from cosyvoice_mac.cluster.pool import Worker, WorkerPool, connect, local_workers
from cosyvoice_mac.cluster.wire import JobMade, RunParcel, job_files, model_ask, packed
from cosyvoice_mac.engine.jobs import Command, Task
from cosyvoice_mac.engine.messages import (
    Done,
    Failed,
    Fault,
    LoadFailed,
    Loading,
    Progress,
    Ready,
    Retrying,
    TaskError,
    WorkerDied,
)
from cosyvoice_mac.engine.outputs import OutputWriteError, write_output
from cosyvoice_mac.engine.worker import WorkerConfig
from cosyvoice_mac.frontend.glossary import glossary_store


class ClusterLink:
    """The engine's ``worker_factory`` on a cluster: owns the app's tie to the cluster at ``address`` (made when the
    first worker starts, by a thread that holds it until ``close``; ``close`` ends a cluster started here, e.g.
    ``local:N``). ``cache_dir``: the app's cache folder, which a local cluster's workers share (they run here)."""

    def __init__(self, address: str, cache_dir: str | None = None):
        self.address = address
        self.cache_dir = cache_dir if local_workers(address) is not None else None
        self._lock = threading.Lock()
        self._holder: threading.Thread | None = None
        self._tied = threading.Event()  # set once the holder tried: ``_refusal`` says why it failed
        self._released = threading.Event()
        self._refusal: Exception | None = None
        self._let_go = False

    def __call__(self, config: WorkerConfig) -> "ClusterWorker":
        return ClusterWorker(config, self)

    def connect(self) -> None:
        """Tie this process to the cluster (once; again after a failed try): ClusterError when it cannot. The tie
        is made by a thread that lives until ``close``: a local cluster's processes end with the thread that
        started them (Linux sends its parent-death signal when that thread ends, not the process)."""
        with self._lock:
            if self._holder is None:
                self._tied.clear()
                self._holder = threading.Thread(target=self._hold, name="cosyvoice-cluster-tie", daemon=True)
                self._holder.start()
        self._tied.wait()
        refusal = self._refusal
        if refusal is not None:
            with self._lock:
                self._holder, self._refusal = None, None
            raise refusal

    def _hold(self) -> None:
        try:
            self._let_go = connect(self.address)
        except Exception as error:  # ClusterError (no cluster there), said by the worker that asked
            self._refusal = error
            self._tied.set()
            return
        self._tied.set()
        self._released.wait()

    def close(self) -> None:
        if self._let_go:
            import ray

            ray.shutdown()
            self._let_go = False
        self._released.set()


@dataclass
class Running:
    """One command on one worker: its runs, which of its jobs ended, which streamed audio already (those cannot
    run again: their listener heard the start), and how many workers it was lost with."""

    runs: list[Command]
    worker: Worker
    ended: set[str] = field(default_factory=set)
    streamed: set[str] = field(default_factory=set)
    tries: int = 0


def after_loss(running: Running, others_left: bool) -> tuple[list[Command], dict[str, str]]:
    """What becomes of ``running``'s jobs when its worker is lost: (those that run once more on another worker,
    job id -> why each other one fails). An ended job is neither; a job runs again only once, only where no
    streamed audio of it went out (its listener heard the start), and only where a worker is left."""
    again, failing = [], {}
    for run in running.runs:
        job_id = run.job.job_id
        if job_id in running.ended:
            continue
        if job_id in running.streamed:
            failing[job_id] = "its streamed audio had begun, so it was not run again"
        elif running.tries:
            failing[job_id] = "it had already been moved once from a worker that was lost"
        elif not others_left:
            failing[job_id] = "no other worker is left"
        else:
            again.append(run)
    return again, failing


class ClusterWorker:
    """Owns the cluster's workers for one engine (their pool, opened by a thread of its own so the app serves
    meanwhile), the events they sent that the supervisor has not read, which worker runs which job (by sequence
    number, for a cancel), the jobs cancelled, and the workers lost."""

    runs_alongside = True  # a job goes to any worker with room while others run
    pid = None

    def __init__(self, config: WorkerConfig, link: ClusterLink):
        self.config, self.link = config, link
        self.inbox: queue.Queue = queue.Queue()
        self.pool: WorkerPool | None = None
        self.loaded = False  # set by the supervisor on Ready
        self.failure: str | None = None  # why it could not start
        self.closing = False
        self.lock = threading.Lock()
        self.where: dict[int, Worker] = {}  # seq -> the worker running that job
        self.busy: dict[str, int] = {}  # worker name -> its commands in flight
        self.cancels: set[int] = set()
        self.lost: list[str] = []
        self._opener = threading.Thread(target=self._open, name="cosyvoice-cluster-open", daemon=True)
        self._opener.start()

    # -- the worker process's interface (engine.supervisor) ------------------------------------------------
    def send(self, command: Command) -> None:
        """Start ``command`` on the least busy worker (a task: on every worker); OSError when none is left."""
        if command.kind == "stop":
            return
        with self.lock:
            workers = self.pool.alive() if self.pool is not None else []
            if not workers:
                raise OSError("no worker of the cluster is left")
            if command.kind == "task":
                threading.Thread(target=self._task, args=(command.task, workers), daemon=True).start()
                return
            worker = min(workers, key=lambda each: self.busy.get(each.name, 0))
            self._launch(Running(command.runs or [command], worker))

    def receive(self, timeout: float) -> list:
        try:
            received = [self.inbox.get(timeout=timeout)]
        except queue.Empty:
            return []
        while not self.inbox.empty():
            received.append(self.inbox.get_nowait())
        return received

    def cancel(self, seq: int) -> None:
        with self.lock:
            self.cancels.add(seq)
            worker = self.where.get(seq)
        if worker is not None and worker.alive:
            try:
                worker.handle.stop.remote([seq])
            except Exception:  # a worker going away stops anyway
                pass

    def alive(self) -> bool:
        """While it starts, or some worker is left; until the supervisor has read what it had to say."""
        if not self.inbox.empty():
            return True
        if self.failure is not None:
            return False
        return self._opener.is_alive() or bool(self.pool is not None and self.pool.alive())

    def silent_s(self) -> tuple[float, bool]:
        """Never silent: Ray watches the workers (a lost one ends its commands with an error here)."""
        return 0.0, True

    def room(self) -> int:
        """Workers with no command in flight."""
        with self.lock:
            workers = self.pool.alive() if self.pool is not None else []
            return sum(1 for worker in workers if not self.busy.get(worker.name))

    def describe(self, status, running: int) -> list[dict]:
        """Each worker of the cluster: its machine, device and engine, its load (jobs running) and whether lost."""
        with self.lock:
            workers = list(self.pool.workers) if self.pool is not None else []
            load = {}
            for worker in self.where.values():
                load[worker.name] = load.get(worker.name, 0) + 1
        return [
            {
                "name": worker.name,
                "machine": worker.facts.host,
                "device": worker.facts.device,
                "engine": worker.facts.engine,
                "load": load.get(worker.name, 0),
                "lost": not worker.alive,
                "pid": worker.facts.pid,
            }
            for worker in workers
        ]

    def exit_description(self) -> str:
        if self.failure is not None:
            return f"could not start on the cluster: {self.failure}"
        return "lost every worker of the cluster (" + "; ".join(self.lost) + ")"

    def stop(self, timeout: float = 0.0, on_event=None) -> str:
        """End every worker (their scratch folders removed); the tie to the cluster stays (``ClusterLink``)."""
        with self.lock:
            self.closing = True
            pool = self.pool
        if pool is not None:
            pool.close()
        return "stopped"

    def kill(self) -> None:
        self.stop()

    def join(self, timeout: float) -> None:
        self._opener.join(timeout)

    # -- starting ----------------------------------------------------------------------------------------
    def _open(self) -> None:
        address = self.link.address
        self.inbox.put(Loading(f"starting the workers of the cluster at {address}"))
        try:
            self.link.connect()
            pool = WorkerPool.open(address, model_ask(self.config), kind=JobWorker, extra=(self.link.cache_dir,))
            import ray

            status = ray.get(pool.workers[0].handle.status.remote())
        except Exception as error:  # ClusterError says what to do; anything else is named
            said = str(error) if isinstance(error, ClusterError) else f"{type(error).__name__}: {said_by(error)}"
            self.inbox.put(LoadFailed(said))
            self.failure = said
            return
        with self.lock:
            if self.closing:
                pool.close()
                return
            self.pool = pool
        workers = ", ".join(worker.facts.describe() for worker in pool.workers)
        self.inbox.put(Ready(f"ready on the cluster's {len(pool.workers)} workers: {workers}", status))

    # -- running ----------------------------------------------------------------------------------------
    def _launch(self, running: Running) -> None:
        """(Under ``lock``) hand ``running`` to its worker; a thread follows its events."""
        worker = running.worker
        self.busy[worker.name] = self.busy.get(worker.name, 0) + 1
        for run in running.runs:
            self.where[run.seq] = worker
        threading.Thread(target=self._follow, args=(running,), name="cosyvoice-cluster-job", daemon=True).start()

    def _follow(self, running: Running) -> None:
        import ray

        worker = running.worker
        try:
            parcels = [self._parcel(run) for run in running.runs]
            glossary, _ = glossary_store(self.config.cache_dir).usable_entries()
            stream = worker.handle.run.options(num_returns="streaming").remote(parcels, tuple(glossary))
            for ref in stream:
                self._arrived(running, ray.get(ref))
        except ray.exceptions.RayTaskError as error:  # the worker's code raised: a bug there, not a lost worker
            self._fail_rest(running, f"the worker {worker.name} failed on this job: {said_by(error, last=True)}")
        except ray.exceptions.RayError as error:  # the actor died, or its machine left
            self._lost(running, said_by(error, limit=200))
        except (OSError, ClusterError) as error:  # a file the job names could not be read here
            self._fail_rest(running, f"the job could not be sent to the cluster: {error}", Fault.INPUT)
        finally:
            with self.lock:
                self.busy[worker.name] -= 1
                for run in running.runs:
                    if self.where.get(run.seq) is worker:
                        del self.where[run.seq]

    def _parcel(self, run: Command) -> RunParcel:
        with self.lock:
            cancelled = run.seq in self.cancels
        return RunParcel(run.seq, run.job, packed(run.voice_entry), job_files(run.job), cancelled)

    def _arrived(self, running: Running, event) -> None:
        if self.closing:
            return
        if isinstance(event, JobMade):
            event = self._saved(event, running.worker)
        if isinstance(event, Progress) and event.audio is not None:  # Ray's copy is a read-only view of its store
            event = replace(event, audio=np.array(event.audio, dtype=np.float32))
            running.streamed.add(event.job_id)
        if event.terminal:
            running.ended.add(event.job_id)
        self.inbox.put(event)

    def _saved(self, made: JobMade, worker: Worker) -> Done:
        """A finished job's Done, its audio saved here in outputs/ with its sidecar (which names the machine)."""
        event, result = made.event, made.event.result
        outputs = self.config.outputs_dir
        if outputs:
            facts = {**made.facts, "machine": worker.facts.host, "cluster_worker": worker.name}
            try:
                files = write_output(outputs, result.job_id, result.audio, result.sample_rate, facts)
            except OutputWriteError as error:  # the samples stay in the result: the user still gets the sound
                samples = np.array(result.audio, dtype=np.float32)
                return replace(event, result=replace(result, audio=samples, output_error=str(error)))
            notes = [*result.notes, *([files.unsigned] if files.unsigned else [])]
            result = replace(result, output_path=str(files.wav_path), sidecar_path=str(files.sidecar_path))
            result = replace(result, audio=None, notes=notes, captions=self._captions(files.wav_path, result))
        else:  # nothing is kept here: the samples travel in the result, as from a worker process
            result = replace(result, audio=np.array(result.audio, dtype=np.float32))
        return replace(event, result=result)

    @staticmethod
    def _captions(wav_path, result):
        if result.words is None:
            return None
        from cosyvoice_mac.pipeline.takes import Word
        from cosyvoice_mac.pipeline.takes.captions import write_captions

        try:
            return write_captions(wav_path, [Word(**word) for word in result.words])
        except OSError:  # the audio is saved; the captions are a convenience
            return None

    def _lost(self, running: Running, reason: str) -> None:
        """``running``'s worker was lost: its jobs not ended run once more on another worker, or fail saying why."""
        worker = running.worker
        if self.closing:
            return
        with self.lock:
            if worker.alive:
                self.pool.lose(worker)
                self.lost.append(f"{worker.name}: {reason}")
            others = self.pool.alive()
            self.inbox.put(WorkerDied(f"the cluster's worker {worker.name} was lost ({reason}); {len(others)} left"))
            again, failing = after_loss(running, bool(others))
            for job_id, why in failing.items():
                message = f"the cluster's worker {worker.name} was lost while running this job ({reason}); {why}"
                self.inbox.put(Failed(job_id, f"{message}. Submit it again to retry it", fault=Fault.RESTARTED))
            if again:
                other = min(others, key=lambda each: self.busy.get(each.name, 0))
                for run in again:
                    note = f"running this job again on {other.name}: the cluster's worker {worker.name} was lost"
                    self.inbox.put(Retrying(run.job.job_id, other.name, reason, f"{note} ({reason})"))
                self._launch(Running(again, other, tries=running.tries + 1))

    def _fail_rest(self, running: Running, message: str, fault: str = Fault.ENGINE) -> None:
        for run in running.runs:
            if run.job.job_id not in running.ended and not self.closing:
                self.inbox.put(Failed(run.job.job_id, message, fault=fault))

    def _task(self, task: Task, workers: list[Worker]) -> None:
        """A task on every worker (each then has the prompt's features, the voices ready): the first's answer,
        or the first refusal."""
        import ray

        try:
            sent = replace(task, args=packed(task.args))
            answers = ray.get([worker.handle.task.remote(sent) for worker in workers])
            answer = next((each for each in answers if isinstance(each, TaskError)), answers[0])
        except Exception as error:  # a worker lost meanwhile, or a file that cannot be read here
            answer = TaskError(task.task_id, f"the cluster could not do this: {said_by(error)}")
        if not self.closing:
            self.inbox.put(answer)
