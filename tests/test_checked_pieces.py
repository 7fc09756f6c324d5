"""The take check beside the synthesis (``engine.checked_pieces``): a sentence is judged on the checking thread
while the pipeline makes the next one; a streamed chunk goes on the moment it is made, its sentence checked after
the fact and flagged, never retaken."""

from __future__ import annotations

import threading

import numpy as np

from cosyvoice_mac.engine.jobs import JobResult
from cosyvoice_mac.engine.takes import JobTakes, TakeChecker
from cosyvoice_mac.pipeline.takes import FLAGGED, PASSED, RETAKEN, TakeVerdict
from cosyvoice_mac.pipeline.types import SAMPLE_RATE, SynthesisResult
from cosyvoice_mac.request import Request, Voice

SENTENCES = ("The first sentence is here.", "The second one follows it.")
WAIT_S = 5.0


def _piece(text: str, index: int, final: bool = True, seed: int = 1) -> SynthesisResult:
    audio = np.full(SAMPLE_RATE // 2, 0.1, np.float32)
    return SynthesisResult(audio, SAMPLE_RATE, 12, 0.01, text, index, len(SENTENCES), final, seed=seed)


class JudgingChecker(TakeChecker):
    """Judges takes by their text (``failing`` fail once per entry), noting on which thread, and lets a test hold a
    verdict back (``hold``) or see that a check began (``began``)."""

    def __init__(self, failing=()):
        super().__init__(recogniser=object())
        self.failing, self.threads = list(failing), []
        self.began, self.hold = threading.Event(), threading.Event()
        self.hold.set()

    def verdict(self, request, speaker, piece, job):
        self.threads.append(threading.current_thread().name)
        self.began.set()
        assert self.hold.wait(WAIT_S)
        if piece.text in self.failing:
            self.failing.remove(piece.text)
            return TakeVerdict(["a phrase repeated"], piece.duration_s)
        return TakeVerdict([], piece.duration_s)


class RemakingPipeline:
    """What a retake calls: ``run`` makes the sentence again (one whole piece)."""

    def __init__(self):
        self.remade = []

    def run(self, request, speaker, should_stop):
        self.remade.append(request.seed)
        return iter([_piece(request.text, 0, seed=request.seed)])


def _request(stream: bool) -> Request:
    return Request.build(" ".join(SENTENCES), Voice.builtin(), seed=1, stream=stream, check=True)


def test_a_sentence_is_judged_while_the_next_is_made_and_retaken_before_it_goes_on():
    checker, pipeline, job = JudgingChecker(failing=[SENTENCES[0]]), RemakingPipeline(), JobTakes()

    def synthesis():
        yield _piece(SENTENCES[0], 0)
        # the pipeline makes the second sentence only once the first one's check is under way, on its own thread
        assert checker.began.wait(WAIT_S), "the first sentence's check did not run beside the second's synthesis"
        yield _piece(SENTENCES[1], 1)

    gone_on = []
    with checker.beside(pipeline, _request(False), None, lambda: False, job) as sentences:
        for made in synthesis():
            gone_on.append([piece.text for piece in sentences.add(made)])
        gone_on.append([piece.text for piece in sentences.rest()])
    assert gone_on == [[], [SENTENCES[0]], [SENTENCES[1]]]  # nothing unchecked goes on
    assert set(checker.threads) == {"take-check_0"} and len(checker.threads) == 3
    assert pipeline.remade == [job.choices[0].takes[1].seed] and job.status == RETAKEN


def test_a_streamed_chunk_goes_on_at_once_and_its_failing_sentence_is_flagged_not_retaken():
    checker, pipeline, job = JudgingChecker(failing=[SENTENCES[1]]), RemakingPipeline(), JobTakes()
    checker.hold.clear()  # no verdict comes until the test says: the chunks must not wait for one
    heard = []
    with checker.beside(pipeline, _request(True), None, lambda: False, job) as sentences:
        for index, text in enumerate(SENTENCES):
            for final in (False, True):
                heard += sentences.add(_piece(text, index, final))
        assert len(heard) == 4  # every chunk was handed on while its sentence's check was held back
        checker.hold.set()
        assert sentences.rest() == []  # heard already: only the verdicts are left to collect
    assert [choice.status for choice in job.choices] == [PASSED, FLAGGED] and pipeline.remade == []
    assert len(job.choices[1].takes[0].piece.audio) == 2 * SAMPLE_RATE // 2  # the whole sentence was judged
    result = JobResult("j", SAMPLE_RATE, 2.0, " ".join(SENTENCES), "zero_shot", 1, 0.1, "m", "cpu")
    job.record(result, 0.0)
    assert result.check["streamed"] and result.check_status == FLAGGED
    assert "sentence 2, heard before its check, was flagged: a phrase repeated" in result.notes


def test_a_failing_sentence_of_a_text_with_inline_tags_is_flagged_not_remade_alone():
    """Its sentence alone would lose the tags' pause, speed or style: only a Retake of the whole text remakes it."""
    checker, pipeline, job = JudgingChecker(failing=[SENTENCES[0]]), RemakingPipeline(), JobTakes()
    request = Request.build(f"{SENTENCES[0]} [pause 300ms] {SENTENCES[1]}", Voice.builtin(), seed=1, check=True)
    with checker.beside(pipeline, request, None, lambda: False, job) as sentences:
        for index, text in enumerate(SENTENCES):
            sentences.add(_piece(text, index))
        sentences.rest()
    assert pipeline.remade == [] and [choice.status for choice in job.choices] == [FLAGGED, PASSED]
