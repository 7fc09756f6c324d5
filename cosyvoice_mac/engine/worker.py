"""The model worker: a child process (spawn) that owns the pipeline and runs one job at a time.

The UI side talks to it through ``WorkerProcess``: a command pipe in, an event pipe out (the typed
events of ``messages.py``) and shared integers that name the jobs to cancel. Only the child imports
torch and the models (``runtime.py``); this module stays light so the UI process can import it.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field

from cosyvoice_mac.engine.jobs import Command
from cosyvoice_mac.engine.messages import Event, LoadFailed, Loading, Ready
from cosyvoice_mac.engine.qos import set_worker_thread_qos
from cosyvoice_mac.engine.start_method import name_this_process, worker_context
from cosyvoice_mac.paths import compile_cache_dir

DEFAULT_PIPELINE = "cosyvoice_mac.pipeline:CosyVoice.from_pretrained"
NO_JOB = -1
# Cancel flags: job ``seq`` is cancelled when slot ``seq % CANCEL_SLOTS`` holds ``seq``. One slot per job in
# flight, so the jobs of a batch are cancelled one by one without a later cancel hiding an earlier one.
CANCEL_SLOTS = 64
HEARTBEAT_S = 0.5  # how often the worker's heartbeat thread counts up; the engine watches the count
RECOGNISER_IDLE_S = 30.0  # low-memory mode: the take check's recogniser is freed after this long without a job

# Read by torch and its libraries when they load, so they are set before the worker starts (a user's
# own value wins). Idle OpenMP threads sleep instead of spinning, but only after a short spin: a decoding
# step is ~700 small operations, and waking a sleeping thread for each cost a third of the step (16-bit
# LLM, 2 cores: 57 -> 34-44 ms a token with 10 000 spins, about 0.75 ms, at about the same CPU time; bench/README.md).
# GOMP_SPINCOUNT is GNU OpenMP's (torch on Linux), KMP_BLOCKTIME (ms) LLVM OpenMP's (torch on macOS).
# Ops MPS lacks run on the CPU; and oneDNN's two per-shape caches (primitives, and ideep's LRU) stay
# bounded: every job has new tensor lengths, so with the default 1024 entries each, memory grows for
# hundreds of jobs; 256 holds a whole vocoder pass (its reuse keeps the speed) and fills within a few jobs.
WORKER_ENVIRONMENT = {
    "OMP_WAIT_POLICY": "PASSIVE",
    "GOMP_SPINCOUNT": "10000",
    "KMP_BLOCKTIME": "1",
    "PYTORCH_ENABLE_MPS_FALLBACK": "1",
    "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "256",
    "LRU_CACHE_CAPACITY": "256",
}


COMPILE_CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"


def unset_worker_environment() -> dict[str, str]:
    """The entries of ``WORKER_ENVIRONMENT`` (and torch.compile's cache folder, ``paths.compile_cache_dir``) this
    process's environment lacks (a user's own values win): ``os.environ.update(...)`` them before torch loads."""
    wanted = {**WORKER_ENVIRONMENT, COMPILE_CACHE_VARIABLE: str(compile_cache_dir())}
    return {name: value for name, value in wanted.items() if name not in os.environ}


@dataclass
class WorkerConfig:
    """How the worker builds its pipeline and where it keeps outputs and cached speakers.

    ``pipeline_factory`` is ``"module:attribute.path"``, called as
    ``factory(model_dir, device=, dtype=, **pipeline_kwargs)``.
    ``outputs_dir`` None saves nothing; ``cache_dir`` None uses the user cache folder. ``model_dir`` is
    None for a backend that needs no model folder (``cosyvoice_mac.preview.PIPELINE_FACTORY``).
    """

    model_dir: str | None
    device: str = "auto"
    dtype: str | None = None
    pipeline_factory: str = DEFAULT_PIPELINE
    pipeline_kwargs: dict = field(default_factory=dict)
    outputs_dir: str | None = "outputs"
    cache_dir: str | None = None
    memory_cache_entries: int = 16
    warmup_text: str = "Hello, this is a short warm-up sentence."
    torch_threads: int | None = None
    vocoder: str = "torch"  # "coreml": swap in the Core ML vocoder where the platform runs it
    compute_units: str = "ALL"  # Core ML: ALL, CPU_AND_GPU, CPU_AND_NE or CPU_ONLY


def cancelled(cancel_seqs, seq: int) -> bool:
    """Whether job ``seq`` was asked to stop (see CANCEL_SLOTS)."""
    return cancel_seqs[seq % CANCEL_SLOTS] == seq


def worker_main(config: WorkerConfig, commands, events, cancel_seqs, heartbeat=None) -> None:
    """Child process entry: load + warm up, report ready, then run commands until stop or EOF.

    ``heartbeat`` (a shared integer) is counted up every HEARTBEAT_S by a thread of its own, so the engine
    can tell a busy worker (the count moves) from a stopped or wedged one (it does not).
    """
    if heartbeat is not None:
        threading.Thread(target=_beat, args=(heartbeat,), name="cosyvoice-heartbeat", daemon=True).start()
    # Ctrl-C in a terminal reaches the whole process group; the parent stops this worker itself, so the
    # worker ignores it instead of printing a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    name_this_process()
    os.environ.update(unset_worker_environment())
    set_worker_thread_qos()
    send = events.send
    source = config.model_dir or f"the backend {config.pipeline_factory} (no model folder)"
    send(Loading(f"loading the model from {source}"))
    try:
        from cosyvoice_mac.engine.runtime import WorkerRuntime
        from cosyvoice_mac.engine.worker_memory import keep_for_life

        runtime = WorkerRuntime(config, send)
        runtime.load()
    except BaseException as error:  # report every load failure, then let the process end
        send(LoadFailed(_describe_load_failure(error, config)))
        return
    keep_for_life()  # the model and the imports stay; each job's clean-up then walks only what the job made
    status = runtime.status()
    send(Ready(f"ready on {status.device}", status))
    serve_commands(runtime, commands, cancel_seqs)


def serve_commands(runtime, commands, cancel_seqs, idle_s: float = RECOGNISER_IDLE_S) -> None:
    """Run ``commands`` (a pipe's end) on ``runtime`` until stop or EOF. In the low-memory mode the take check's
    recogniser is freed once no command has come for ``idle_s``: a long job's lines follow each other at once, so
    it stays loaded through the job and goes after it."""
    while True:
        try:
            if getattr(runtime.pipeline, "low_memory", False) and not commands.poll(idle_s):
                runtime.takes.release()
            command: Command = commands.recv()
        except (EOFError, OSError):  # the UI process went away
            return
        if command.kind == "stop":
            return
        if command.kind == "run":
            seq = command.seq
            runtime.run(command.job, should_stop=lambda: cancelled(cancel_seqs, seq), voice_entry=command.voice_entry)
        elif command.kind == "batch":
            stops = [functools.partial(cancelled, cancel_seqs, run.seq) for run in command.runs]
            runtime.run_batch([run.job for run in command.runs], stops, [run.voice_entry for run in command.runs])
        elif command.kind == "task":
            runtime.run_task(command.task)


def _beat(heartbeat) -> None:
    while True:
        heartbeat.value += 1
        time.sleep(HEARTBEAT_S)


def _describe_load_failure(error: BaseException, config: WorkerConfig) -> str:
    text = str(error) or type(error).__name__
    if config.model_dir is None:  # a backend that needs no model folder (the preview voice)
        return f"the voice backend could not be started: {text}"
    return f"the model in {config.model_dir} could not be loaded: {text}"


class WorkerProcess:
    """UI-side handle of one worker process: its pipes, its cancel flag, and how to stop it."""

    runs_alongside = False  # it runs one job (or one batch) at a time: the next waits until it ends

    def __init__(self, config: WorkerConfig, start_method: str = "auto"):
        os.environ.update(unset_worker_environment())  # the child starts with our environment (start_method.py)
        context = worker_context(start_method)
        command_reader, self._command_writer = context.Pipe(duplex=False)
        self.events, event_writer = context.Pipe(duplex=False)
        self._cancel_seqs = context.Array("q", [NO_JOB] * CANCEL_SLOTS, lock=False)
        self._heartbeat = context.Value("q", 0, lock=False)
        self.process = context.Process(
            target=worker_main,
            args=(config, command_reader, event_writer, self._cancel_seqs, self._heartbeat),
            name="cosyvoice-worker",
            daemon=True,
        )
        self.process.start()
        # Drop our copies of the child's ends: a dead child then reads as EOF instead of a hang.
        command_reader.close()
        event_writer.close()
        self.started_at = time.monotonic()
        self._last_beat, self._heard_at = 0, self.started_at
        self.loaded = False  # set by its supervisor when the worker says it is ready

    def silent_s(self) -> tuple[float, bool]:
        """(seconds since the heartbeat last moved, or since the start; whether it has ever beaten)."""
        beat, now = self._heartbeat.value, time.monotonic()
        if beat != self._last_beat:
            self._last_beat, self._heard_at = beat, now
        return now - self._heard_at, self._last_beat > 0

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def sentinel(self) -> int:
        return self.process.sentinel

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        self.process.kill()

    def join(self, timeout: float) -> None:
        self.process.join(timeout)

    def room(self) -> int:
        """How many more commands it takes beside those running (it runs one at a time: see runs_alongside)."""
        return 1

    def describe(self, status, running: int) -> list[dict]:
        """The status panel's list of workers: this process, on this machine (``status``: its last
        ``WorkerStatus``; ``running``: the jobs it runs now)."""
        return [
            {
                "name": "local",
                "machine": socket.gethostname(),
                "device": getattr(status, "device", None),
                "engine": getattr(status, "engine", None),
                "load": running,
                "pid": self.pid,
            }
        ]

    def exit_description(self) -> str:
        code = self.process.exitcode
        if code is None:
            return "is still running"
        if code < 0:
            import signal

            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"was killed by {name}"
        return f"exited with code {code}"

    def send(self, command: Command) -> None:
        """Raises BrokenPipeError / OSError when the worker is gone."""
        self._command_writer.send(command)

    def cancel(self, seq: int) -> None:
        self._cancel_seqs[seq % CANCEL_SLOTS] = seq

    def receive(self, timeout: float) -> list[Event]:
        """Events that arrived within ``timeout`` s. Raises EOFError when the worker is gone."""
        received = []
        if self.events.poll(timeout):
            while True:
                received.append(self.events.recv())
                if not self.events.poll(0):
                    break
        return received

    def stop(self, timeout: float, on_event=None) -> str:
        """Ask politely (stop command; events read meanwhile go to ``on_event``), then terminate, then kill.

        Returns how it ended: "stopped", "terminated" or "killed".
        """
        deadline = time.monotonic() + timeout
        try:
            self.send(Command("stop"))
        except OSError:
            pass
        while self.process.is_alive() and time.monotonic() < deadline:
            try:
                for event in self.receive(min(0.05, max(0.0, deadline - time.monotonic()))):
                    if on_event is not None:
                        on_event(event)
            except (EOFError, OSError):
                self.process.join(max(0.0, deadline - time.monotonic()))
        how = "stopped"
        if self.process.is_alive():
            how = "terminated"
            self.process.terminate()
            self.process.join(2.0)
        if self.process.is_alive():
            how = "killed"
            self.process.kill()
            self.process.join(5.0)
        self.close()
        return how

    def close(self) -> None:
        for connection in (self._command_writer, self.events):
            try:
                connection.close()
            except OSError:
                pass
