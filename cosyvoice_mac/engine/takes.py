"""Inside the worker: each sentence of a synthesis checked as it is made, retaken with a new seed when it fails,
and its words timed, with Whisper (``asr``) as the recogniser. ``pipeline.takes`` judges; this module owns
the loaded recogniser, the voices' learned speaking rates and the sentences' outcomes for one job."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from cosyvoice_mac.engine import asr
from cosyvoice_mac.engine.checked_pieces import CheckedPieces, UncheckedPieces
from cosyvoice_mac.frontend.inline import tag_spans
from cosyvoice_mac.frontend.resample import resample
from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.pipeline.takes import (
    FLAGGED,
    PASSED,
    RETAKEN,
    Heard,
    NoRecogniser,
    TakeChoice,
    TakeVerdict,
    VoiceRates,
    Word,
    check_take,
    retake_until_passed,
)
from cosyvoice_mac.pipeline.takes.captions import SUFFIXES, caption_text
from cosyvoice_mac.pipeline.takes.words import align_words, estimated_words, on_timeline
from cosyvoice_mac.request import Request
from cosyvoice_mac.settings import bounds, resolve, setting
from cosyvoice_mac.sound.wav import write_wav

TAKES_FOLDER = "takes"  # in outputs/: every take of a job with a sentence made more than once, a folder per job
RANDOM_WEIGHTS_SUFFIX = "-random-weights"  # loading.model_identity's mark: such a model speaks noise by design


def retakes_allowed() -> int:
    """The ``retakes`` setting, held to its range (a typo in the variable means the default, not a crash)."""
    low, high = bounds("retakes")
    try:
        wanted = int(resolve("retakes"))
    except ValueError:
        wanted = setting("retakes").default
    return int(min(max(wanted, low), high))


def take_words(piece, verdict: TakeVerdict) -> list[Word]:
    """The words of ``piece.text`` timed on the take's own audio: the recogniser's times moved onto the text's
    words, or (no recogniser for the language, or nothing heard) times shared out over the sound."""
    if verdict.words:
        return align_words(piece.text, verdict.words, piece.duration_s, piece.audio, piece.sample_rate)
    return estimated_words(piece.text, piece.audio, piece.sample_rate) if piece.audio.size else []


class WhisperRecogniser:
    """``takes.Recogniser`` over Whisper: the bundled tiny.en for English, the multilingual model for other languages
    when it has been downloaded. It never downloads in the middle of a job: a language no model here speaks is "not
    checked"."""

    def __init__(self, transcriber: asr.Transcriber | None = None):
        self.transcriber = transcriber or asr.shared_transcriber()

    def hear(self, audio: np.ndarray, sample_rate: int, language: str | None) -> Heard:
        model = self._model_for(language)
        wave = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))[None]
        samples = resample(wave, sample_rate, asr.ASR_RATE)[0].numpy()
        try:
            text, words = self.transcriber.hear_words(model, samples, language)
        except asr.TranscriptionError as error:  # faster-whisper missing: synthesis goes on unchecked
            raise NoRecogniser(str(error)) from error
        return Heard(text, tuple(Word(word, start, end) for word, start, end in words), model.name)

    def _model_for(self, language: str | None) -> asr.AsrModel:
        """English: the bundled tiny.en (a fraction of the multilingual model's cost, and enough to tell a dropped or
        doubled phrase); another language: the multilingual model if it is here."""
        multilingual = self.transcriber.store.cached_multilingual()
        if language == "en":
            try:
                return asr.bundled_english_model()
            except asr.TranscriptionError as error:
                if multilingual is None:
                    raise NoRecogniser(f"no recogniser ({error})") from error
        if multilingual is None:
            raise NoRecogniser(f"no recogniser for {language or 'this language'}")
        return multilingual


@dataclass
class JobTakes:
    """One job's sentences as checked: each one's TakeChoice and timed words (times from the sentence's start)."""

    choices: list[TakeChoice] = field(default_factory=list)
    words: list[tuple[float, list[Word]]] = field(default_factory=list)  # (the sentence's length, its words)
    seconds: float = 0.0  # the checks' own time (on the checking thread, beside the synthesis)
    waited_s: float = 0.0  # what the job waited for them (and for retakes): what the check added to its time
    streamed: bool = False  # heard as it was made: checked after the fact, flagged, never retaken
    take_files: dict[tuple[int, int], str] = field(default_factory=dict)  # (sentence, take) -> its kept WAV

    @property
    def status(self) -> str:
        statuses = {choice.status for choice in self.choices}
        return FLAGGED if FLAGGED in statuses else RETAKEN if RETAKEN in statuses else PASSED

    def timeline(self, trimmed_start_s: float = 0.0) -> list[Word]:
        """Every sentence's words on the job's audio (sentences back to back, less what the trim cut at the start)."""
        offsets, at = [], -trimmed_start_s
        for length, words in self.words:
            offsets.append((at, words))
            at += length
        return [word for word in on_timeline(offsets) if word.end > 0]

    def record(self, result, trimmed_start_s: float, outputs_dir=None) -> None:
        """Put the check's outcome, its time and the words on the saved audio's timeline into the JobResult; with
        ``outputs_dir``, keep the takes of every sentence made more than once there (``keep_takes``)."""
        if outputs_dir:
            try:
                self.keep_takes(Path(outputs_dir), result.job_id)
            except OSError as error:  # the result stands; only the other takes are not kept
                result.notes.append(f"the other takes could not be kept: {error}")
        result.timings["check"] = round(self.seconds, 4)
        result.timings["check_wait"] = round(self.waited_s, 4)
        result.check = self.as_dict()
        result.words = [word.as_dict() for word in self.timeline(trimmed_start_s) if word.start < result.duration_s]
        if self.streamed:  # heard as it was made: a failing sentence can only be flagged, and retaken on request
            for index, choice in enumerate(self.choices, 1):
                if choice.status == FLAGGED:
                    summary = choice.verdict.summary()
                    result.notes.append(f"sentence {index}, heard before its check, was flagged: {summary}")

    def keep_takes(self, outputs_dir: Path, job_id: str) -> None:
        """When a sentence was made more than once: every take of each sentence, as the model made it (before
        post-processing), in ``outputs_dir/takes/<job id>/s<sentence>-t<take>.wav`` with its timed words beside it
        (``.words.json``). The page plays them, and a take picked there is put in the output from them
        (``engine.take_pick``); each take's ``file`` in the check names its WAV, relative to ``outputs_dir``."""
        if all(len(choice.takes) < 2 for choice in self.choices):
            return
        for sentence, choice in enumerate(self.choices):
            for number, take in enumerate(choice.takes):
                relative = Path(TAKES_FOLDER) / job_id / f"s{sentence + 1}-t{number + 1}.wav"
                write_wav(outputs_dir / relative, take.piece.audio, take.piece.sample_rate)
                words = self.words[sentence][1] if number == choice.kept else take_words(take.piece, take.verdict)
                captions = (outputs_dir / relative).with_suffix(SUFFIXES["json"])
                atomic_write(captions, caption_text(words, "json").encode("utf-8"))
                self.take_files[(sentence, number)] = relative.as_posix()

    def as_dict(self) -> dict:
        sentences = [choice.as_dict() for choice in self.choices]
        for (sentence, number), file in self.take_files.items():
            sentences[sentence]["takes"][number]["file"] = file
        return {
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "waited_s": round(self.waited_s, 3),
            "streamed": self.streamed,
            "sentences": sentences,
        }


class TakeChecker:
    """Owns the recogniser (loaded on the first check, kept for the worker's life), the thread it runs on and the
    voices' rates."""

    def __init__(self, recogniser=None):
        self._recogniser = recogniser
        self.rates = VoiceRates()
        self._thread: ThreadPoolExecutor | None = None
        self.last_job: JobTakes | None = None  # the library door's last checked synthesis

    @property
    def thread(self) -> ThreadPoolExecutor:
        """The checking thread: every take is judged there, one at a time, beside the pipeline's work."""
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="take-check")
        return self._thread

    @property
    def recogniser(self):
        if self._recogniser is None:
            self._recogniser = WhisperRecogniser()
        return self._recogniser

    def release(self) -> None:
        """Free the recogniser's model (the low-memory mode does when the worker goes idle); it loads again when
        the next sentence is checked."""
        transcriber = getattr(self._recogniser, "transcriber", None)
        if transcriber is not None:
            transcriber.release()

    @staticmethod
    def wanted(pipeline, request, is_conversion: bool) -> bool:
        """Whether this job's sentences are checked: a synthesis (a streamed one after the fact) or a conversion's
        pieces (against the recording's words), asked for by the request (``check``) or, when it does not say, by
        the global switch, on a model that speaks (random weights make noise on purpose: never checked)."""
        asked = getattr(request, "check", None)
        if not (resolve("check") if asked is None else asked):
            return False
        return not str(pipeline.model_id).endswith(RANDOM_WEIGHTS_SUFFIX)

    def checked(self, pipeline, request: Request, speaker, results, should_stop):
        """``results`` (one synthesis's sentences) each settled in turn, each checked while the next is made: the
        library door's checked iterator. ``last_job`` keeps its outcome (what was retaken, what the checks cost)."""
        job = self.last_job = JobTakes()
        with self.beside(pipeline, request, speaker, should_stop, job) as sentences:
            for piece in results:
                yield from sentences.add(piece)
            yield from sentences.rest()

    def beside(self, pipeline, request, speaker, should_stop, job: JobTakes | None, source=None):
        """A job's sentences on their way out (``CheckedPieces``): each checked on the checking thread while the
        next is made; ``job`` None: the job is not checked, every piece goes on as it is made. ``source``: a voice
        conversion's recording (``DecodedSource``), whose pieces' words are what each converted piece must say."""
        if job is None:
            return UncheckedPieces()
        return CheckedPieces(self, pipeline, request, speaker, should_stop, job, source)

    def source_words(self, source, index: int) -> str:
        """What the recogniser hears in piece ``index`` of a conversion's recording: the text its converted piece
        must say (empty when nothing is heard or no recogniser is here). A multilingual model, when downloaded,
        finds the language itself; otherwise the bundled English one listens."""
        wave = source.piece_wave(source.pieces[index])[0].numpy()
        language = None if self.recogniser_is_multilingual() else "en"
        try:
            return self.recogniser.hear(wave, asr.ASR_RATE, language).text.strip()
        except NoRecogniser:
            return ""

    def recogniser_is_multilingual(self) -> bool:
        store = getattr(getattr(self.recogniser, "transcriber", None), "store", None)
        return store is not None and store.cached_multilingual() is not None

    def verdict(self, request: Request, speaker, piece, job: JobTakes) -> TakeVerdict:
        """One take of ``piece.text`` judged (on the checking thread: the recogniser is only ever used there); its
        time is counted in ``job.seconds``."""
        started = time.perf_counter()
        try:
            return check_take(
                piece.audio,
                piece.sample_rate,
                piece.text,
                self.recogniser,
                speed=request.speed,
                voice=getattr(speaker, "audio_hash", None),
                rates=self.rates,
            )
        finally:
            job.seconds += time.perf_counter() - started

    def settle(self, pipeline, request: Request, speaker, piece, should_stop, job: JobTakes, first=None, **how):
        """``piece`` (one sentence) judged (``first``: its verdict, when it was checked already; ``how["check"]``:
        how a take is judged, by default here and now); retaken while it fails and retakes are left
        (``how["retakes"]``: the setting's, unless the caller says); the kept take, with the note of what happened,
        replaces it. Its outcome and words are added to ``job``."""
        check = how.get("check") or (lambda candidate: self.verdict(request, speaker, candidate, job))
        retakes = how.get("retakes")

        def remake(seed: int):
            sentence = replace(request, text=piece.text, seed=seed)
            parts = list(pipeline.run(sentence, speaker, should_stop))
            if not parts:
                return replace(piece, audio=np.zeros(0, np.float32), seed=seed)
            audio = np.concatenate([part.audio for part in parts]).astype(np.float32)
            notes = [note for part in parts for note in part.notes]
            tokens = sum(part.speech_token_count for part in parts)
            return replace(piece, audio=audio, seed=seed, speech_token_count=tokens, notes=[*piece.notes, *notes])

        allowed = retakes_allowed() if retakes is None else retakes
        if tag_spans(request.text):  # a sentence of a tagged text is a part of its plan (a pause, a speed run, a
            allowed = 0  # style's recording) that only the whole text remakes: flagged, for a Retake of the whole
        choice = retake_until_passed(piece, piece.seed, check, remake, allowed, should_stop, first)
        kept = choice.piece
        words = take_words(kept, choice.verdict)
        job.choices.append(choice)
        job.words.append((kept.duration_s, words))
        notes = list(kept.notes) + ([choice.note] if choice.note else [])
        return replace(kept, notes=list(dict.fromkeys(notes)), words=words)
