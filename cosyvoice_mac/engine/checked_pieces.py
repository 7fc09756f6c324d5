"""A job's sentences on their way out of the worker, each judged on the checking thread while the pipeline makes
the next one: the check's time hides behind the synthesis wherever the machine has a core to spare.

A finished synthesis: a sentence is handed on once its verdict is in (retaken first, on the caller's thread,
which owns the pipeline, when it failed), so nothing unchecked is saved; the last sentence is the only one whose
check the job waits for in full. A stream: every chunk is handed on the moment it is made (it is heard as it
comes, so the check must never hold it back); each finished sentence is checked after the fact, and one that
fails is flagged (the page offers a retake), never replaced.
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future
from dataclasses import replace

import numpy as np

from cosyvoice_mac.pipeline.takes import TakeVerdict


class CheckedPieces:
    """Owns the sentences of one job whose checks are under way, in the order they were made. ``checker`` is the
    worker's ``engine.takes.TakeChecker`` (its thread judges), ``job`` the job's ``JobTakes`` (the outcomes)."""

    def __init__(self, checker, pipeline, request, speaker, should_stop, job, source=None):
        self.checker, self.pipeline, self.request = checker, pipeline, request
        self.speaker, self.should_stop, self.job = speaker, should_stop, job
        self.source = source  # a conversion's recording: each piece must say what its part of it says
        job.streamed = bool(request.stream)
        self._waiting: deque[tuple[object, Future]] = deque()  # (a whole sentence, its verdict to come)
        self._chunks: list = []  # a stream: the chunks of the sentence being made

    def __enter__(self) -> "CheckedPieces":
        return self

    def __exit__(self, *_) -> None:
        for _, verdict in self._waiting:  # the job ended early (stopped, failed): nothing more to judge
            verdict.cancel()

    def add(self, piece) -> list:
        """``piece`` as the pipeline made it; the pieces that may go on now, in order."""
        if self.request.stream:
            self._chunks.append(piece)
            if piece.is_final_chunk:
                self._start(_whole_sentence(self._chunks))
                self._chunks = []
            return [piece]
        self._start(piece)  # judged while the pipeline makes the next sentence
        return [self._settle() for _ in range(len(self._waiting) - 1)]

    def rest(self) -> list:
        """The sentences still being judged, settled (a stream's were heard already: only their verdicts count)."""
        settled = [self._settle() for _ in range(len(self._waiting))]
        return [] if self.request.stream else settled

    def _start(self, sentence) -> None:
        self._waiting.append((sentence, self.checker.thread.submit(self._judge, sentence)))

    def _judge(self, take) -> tuple[TakeVerdict, str]:
        """The take's verdict and the text it was judged against (a conversion's: its source piece's words)."""
        text = take.text
        if self.source is not None:
            text = self.checker.source_words(self.source, take.segment_index)
            if not text:  # nothing heard in the recording: nothing to compare, and no words to time
                return TakeVerdict([], take.duration_s, recogniser="not checked: no words heard in the recording"), ""
            take = replace(take, text=text)
        return self.checker.verdict(self.request, self.speaker, take, self.job), text

    def _settle(self):
        sentence, verdict = self._waiting.popleft()
        started = time.perf_counter()
        first, text = verdict.result()
        said = sentence.text  # a conversion's piece keeps its own text; its words are the recording's
        sentence = replace(sentence, text=text)
        settled = self.checker.settle(
            self.pipeline,
            self.request,
            self.speaker,
            sentence,
            self.should_stop,
            self.job,
            first=first,
            check=lambda take: self.checker.thread.submit(self._judge, take).result()[0],
            # heard already (a stream), or the same every time (a conversion follows its recording): never retaken
            retakes=0 if self.request.stream or self.source is not None else None,
        )
        self.job.waited_s += time.perf_counter() - started
        return replace(settled, text=said)


def _whole_sentence(chunks: list):
    """A streamed sentence's chunks as one take (what was heard of it)."""
    audio = np.concatenate([chunk.audio for chunk in chunks]).astype(np.float32)
    return replace(chunks[-1], audio=audio, speech_token_count=sum(chunk.speech_token_count for chunk in chunks))


class UncheckedPieces:
    """A job that is not checked: every piece goes on as it is made."""

    def __enter__(self) -> "UncheckedPieces":
        return self

    def __exit__(self, *_) -> None:
        pass

    def add(self, piece) -> list:
        return [piece]

    def rest(self) -> list:
        return []
