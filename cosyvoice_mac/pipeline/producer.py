"""The LLM's side of a streamed sentence: a long-lived decode thread, the producer that runs on it, and the
device turns it shares with the chunk (flow + vocoder) work on the consumer's thread.

One :class:`DecodeThread` per loaded model decodes every streamed sentence. A thread per sentence would
cost a thread start each time and, on MLX, a new stream (a Metal command queue) each time: a stream
belongs to the thread whose first device work made it (mlx >= 0.31.2), and the ceiling on command queues
is reached after about 1600 sentences.
"""

from __future__ import annotations

import queue
import threading
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

ABANDON_WAIT_S = 30.0  # how long abandon() waits for the LLM step in flight


class DeviceTurns:
    """Owns whose turn it is to issue device work in one streamed request: the LLM thread or the chunk thread.

    On MPS the two must never issue work at the same time (a SIGABRT, not an exception), nor on MLX's
    Metal (concurrent evaluation from two threads crashes). Each LLM step and each chunk (flow + vocoder)
    is one turn; a waiting chunk goes first, so the LLM finishes the step in flight and then waits: the
    first audio is not held up by the LLM running ahead. Disabled (CPU, CUDA) it costs nothing and both
    run freely.
    """

    def __init__(self, enabled: bool, settle: Callable[[], None] | None = None):
        """``settle``: called at the end of each LLM step's turn, on its thread, to wait for the device work
        the step queued ahead (MLX queues the next step with ``mx.async_eval``): a turn ends when its work has."""
        self.enabled = enabled
        self._settle = settle
        self._state = threading.Condition()
        self._busy = False
        self._chunks_waiting = 0

    @contextmanager
    def llm_step(self) -> Iterator[None]:
        """The context of one LLM step: waits while a chunk runs or waits."""
        with self._turn(chunk=False):
            yield
            if self.enabled and self._settle is not None:
                self._settle()

    def chunk(self):
        """The context of one chunk's flow + vocoder work: waits only for the LLM step in flight."""
        return self._turn(chunk=True)

    @contextmanager
    def _turn(self, chunk: bool) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        with self._state:
            self._chunks_waiting += chunk
            self._state.wait_for(lambda: not self._busy and (chunk or not self._chunks_waiting))
            self._chunks_waiting -= chunk
            self._busy = True
        try:
            yield
        finally:
            with self._state:
                self._busy = False
                self._state.notify_all()


class DecodeThread:
    """Owns one long-lived daemon thread that runs decoding jobs one after another, in the order given.

    ``run(job)`` queues ``job`` (a callable that handles its own errors) and returns an Event set when it
    has finished. The thread starts with the first job (and again if it ever died).
    """

    def __init__(self, name: str = "llm-decode"):
        self.name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()
        self._pending = 0  # jobs queued or running

    def run(self, job: Callable[[], None]) -> threading.Event:
        done = threading.Event()
        with self._starting:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
            self._pending += 1
        self._jobs.put((job, done))
        return done

    @property
    def busy(self) -> bool:
        """Whether a job runs or waits (False: the thread is idle, e.g. after a stopped stream)."""
        with self._starting:
            return self._pending > 0

    @property
    def ident(self) -> int | None:
        """The thread's id (None before the first job)."""
        return self._thread.ident if self._thread is not None else None

    def _serve(self) -> None:
        while True:
            job, done = self._jobs.get()
            try:
                job()
            finally:
                with self._starting:
                    self._pending -= 1
                done.set()


_END = object()


class TokenProducer:
    """Owns one sentence's pull of speech tokens from the LLM, as fast as it can (unless paused), on
    ``decode_thread`` (None: on a thread of its own that ends with the sentence).

    Each pull is one LLM step and takes a device turn from ``turns`` (MPS, MLX: never beside a chunk).
    """

    def __init__(
        self,
        tokens: Iterable[int],
        turns: DeviceTurns | None = None,
        hold_after: int | None = None,
        decode_thread: DecodeThread | None = None,
    ):
        """``hold_after``: stop once that many tokens exist, until :meth:`pause` (False) releases it."""
        self.tokens: list[int] = []
        self._hold_after = hold_after
        self.finished = False
        self.error: BaseException | None = None
        self._turns = turns or DeviceTurns(enabled=False)
        self._abandoned = False
        self._paused = False
        self._ready = threading.Condition()
        source = iter(tokens)
        if decode_thread is not None:
            self._done = decode_thread.run(lambda: self._run(source))
        else:  # a thread of its own that ends with the sentence
            self._done = threading.Event()
            threading.Thread(target=self._run_then_signal, args=(source,), name="llm-producer", daemon=True).start()

    def _run_then_signal(self, tokens: Iterator[int]) -> None:
        try:
            self._run(tokens)
        finally:
            self._done.set()

    def _run(self, tokens: Iterator[int]) -> None:
        try:
            while True:
                with self._turns.llm_step():
                    token = next(tokens, _END)
                if token is _END:
                    return
                with self._ready:
                    self._ready.wait_for(lambda: not self._held() or self._abandoned)
                    if self._abandoned:
                        return
                    self.tokens.append(token)
                    self._ready.notify_all()
        except BaseException as error:  # handed to the consumer, which raises it in its own thread
            self.error = error
        finally:
            with self._ready:
                self.finished = True
                self._ready.notify_all()

    def wait_for(self, count: int) -> int:
        """Block until ``count`` tokens exist or decoding ended; return how many exist."""
        with self._ready:
            self._ready.wait_for(lambda: len(self.tokens) >= count or self.finished)
            if self.error is not None:
                raise self.error
            return len(self.tokens)

    def _held(self) -> bool:
        return self._paused or (self._hold_after is not None and len(self.tokens) >= self._hold_after)

    def pause(self, paused: bool) -> None:
        """Hold the LLM after its current token (so the first chunk has the CPU to itself), or let it go on
        (which also lifts ``hold_after``)."""
        with self._ready:
            self._paused = paused
            if not paused:
                self._hold_after = None
            self._ready.notify_all()

    def abandon(self) -> None:
        """Stop pulling after the step in flight and wait for it (the decode thread is then free)."""
        with self._ready:
            self._abandoned = True
            self._ready.notify_all()
        self._done.wait(timeout=ABANDON_WAIT_S)
