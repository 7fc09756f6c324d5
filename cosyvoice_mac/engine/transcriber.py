"""Prompt transcription in a child process of its own.

``cosyvoice_mac.engine.asr`` loads torch (silence trimming, resampling), which the UI process never
imports, and a transcription should not wait behind a long synthesis in the model worker. So the UI
asks :class:`TranscriberProcess`, which starts a small process on first use, keeps it (and the loaded
Whisper model) for the next request, and ends it after ``idle_s`` seconds without one.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from cosyvoice_mac.engine.jobs import EngineError
from cosyvoice_mac.engine.worker import unset_worker_environment

IDLE_S = 600.0
SILENCE_S = 180.0  # the longest wait without any sign of life (start-up, model load, a download's progress)
POLL_S = 0.2

Progress = Callable[[int, int, str], None]  # (bytes done, bytes total or 0, what is happening)


class TranscriptionFailed(EngineError):
    """The recording could not be transcribed; the message says why and what to do (safe to show)."""


def transcriber_main(requests, replies) -> None:
    """Child process: answer (request id, audio path, language) with the words, until None or EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends this process itself
    os.environ.update(unset_worker_environment())
    try:
        from cosyvoice_mac.engine import asr
    except Exception as error:  # answer every request with the reason instead of dying silently
        asr, import_error = None, f"the speech recogniser cannot be loaded: {type(error).__name__}: {error}"
    while True:
        try:
            request = requests.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        request_id, path, language = request
        if asr is None:
            replies.send(("failed", request_id, import_error))
            continue

        def progress(done: int, total: int, what: str, request_id=request_id) -> None:
            replies.send(("progress", request_id, (int(done), int(total), str(what))))

        try:
            replies.send(("done", request_id, asr.transcribe(path, language=language, progress=progress)))
        except asr.TranscriptionError as error:
            replies.send(("failed", request_id, str(error)))
        except Exception as error:  # keep serving: the next recording may be fine
            replies.send(("failed", request_id, f"transcription failed: {type(error).__name__}: {error}"))


class TranscriberProcess:
    """Owns the transcription child process: starting it on demand, one request at a time, ending it
    when idle, on close, or when it stops answering."""

    def __init__(self, idle_s: float = IDLE_S, silence_s: float = SILENCE_S, context: str = "spawn"):
        self.idle_s, self.silence_s = idle_s, silence_s
        self._context = multiprocessing.get_context(context)
        self._lock = threading.Lock()
        self._process = None
        self._requests = self._replies = None
        self._next_id = 0
        self._idle_timer: threading.Timer | None = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.is_alive() else None

    def transcribe(self, audio_path: str | Path, language: str | None = None, progress: Progress | None = None) -> str:
        """The words spoken in ``audio_path`` (language None: detect, or English with the bundled model).

        Raises TranscriptionFailed with a message for the user. ``progress`` runs in this thread.
        """
        with self._lock:
            if self._closed:
                raise TranscriptionFailed("the app is shutting down")
            self._cancel_idle_timer()
            try:
                return self._ask(str(audio_path), language, progress)
            finally:
                self._arm_idle_timer()

    def close(self) -> None:
        """End the child (a transcription in progress fails); later calls to transcribe are refused."""
        self._closed = True
        self._cancel_idle_timer()
        process = self._process
        if process is not None and process.is_alive():
            process.terminate()  # unblocks a transcription waiting on it in another thread
        with self._lock:
            self._stop()

    # -- inside the lock -----------------------------------------------------------------------
    def _ask(self, path: str, language: str | None, progress: Progress | None) -> str:
        self._ensure_started()
        self._next_id += 1
        request_id = self._next_id
        try:
            self._requests.send((request_id, path, language))
        except OSError:
            return self._died()
        deadline = time.monotonic() + self.silence_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._stop()
                raise TranscriptionFailed(
                    f"the speech recogniser gave no answer for {self.silence_s:g} s, so it "
                    "was stopped; try again, or type the transcript"
                )
            try:
                if not self._replies.poll(min(POLL_S, remaining)):
                    if not self._process.is_alive():
                        return self._died()
                    continue
                kind, reply_id, payload = self._replies.recv()
            except (EOFError, OSError):
                return self._died()
            if reply_id != request_id:
                continue  # an answer to a request that timed out earlier
            if kind == "progress":
                deadline = time.monotonic() + self.silence_s
                if progress is not None:
                    progress(*payload)
            elif kind == "done":
                return payload
            else:
                raise TranscriptionFailed(payload)

    def _ensure_started(self) -> None:
        if self._process is not None and self._process.is_alive():
            return
        self._stop()
        request_reader, self._requests = self._context.Pipe(duplex=False)
        self._replies, reply_writer = self._context.Pipe(duplex=False)
        self._process = self._context.Process(
            target=transcriber_main, args=(request_reader, reply_writer), name="cosyvoice-transcriber", daemon=True
        )
        self._process.start()
        request_reader.close()  # a dead child then reads as EOF instead of a hang
        reply_writer.close()

    def _died(self) -> str:
        code = self._process.exitcode if self._process is not None else None
        self._stop()
        how = f"exit code {code}" if code is not None and code >= 0 else "it was killed"
        raise TranscriptionFailed(
            f"the speech recogniser stopped unexpectedly ({how}); try again, or type the transcript"
        )

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            try:
                self._requests.send(None)
            except (OSError, AttributeError):
                pass
            process.join(2.0)
            if process.is_alive():
                process.terminate()
                process.join(2.0)
            if process.is_alive():
                process.kill()
                process.join(2.0)
        for connection in (self._requests, self._replies):
            if connection is not None:
                try:
                    connection.close()
                except OSError:
                    pass
        self._requests = self._replies = None

    # -- idle shutdown -------------------------------------------------------------------------
    def _arm_idle_timer(self) -> None:
        if self._closed or self.idle_s <= 0:
            return
        self._idle_timer = threading.Timer(self.idle_s, self._stop_if_idle)
        self._idle_timer.daemon = True
        self._idle_timer.start()

    def _cancel_idle_timer(self) -> None:
        timer, self._idle_timer = self._idle_timer, None
        if timer is not None:
            timer.cancel()

    def _stop_if_idle(self) -> None:
        if self._lock.acquire(blocking=False):  # busy means not idle: the next request re-arms the timer
            try:
                self._stop()
            finally:
                self._lock.release()
