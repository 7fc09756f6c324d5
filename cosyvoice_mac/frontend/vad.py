"""Voice activity detection with Silero VAD (the ONNX graph bundled in the ``silero-vad`` wheel, run by
onnxruntime): find where the speech in a prompt starts and ends, and trim the silence around it.

The graph reads 512-sample windows of 16 kHz audio, each preceded by the previous window's last 64
samples, and carries a (2, 1, 128) recurrent state; it returns one speech probability per 32 ms window.
Segments follow Silero's own rules in simplified form: speech starts where the probability reaches
``threshold`` and ends after ``min_silence_s`` below ``threshold - 0.15``; segments shorter than
``min_speech_s`` are dropped.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from cosyvoice_mac.sound.limits import MIN_CONVERT_SPEECH_SECONDS

VAD_RATE = 16000
WINDOW = 512  # samples per window at 16 kHz (32 ms)
CONTEXT = 64  # samples of the previous window the graph sees first
STATE_SHAPE = (2, 1, 128)
MODEL_FILE = "silero_vad.onnx"
INSTALL_HINT = "pip install 'silero-vad==6.2.3' --no-deps  (or: bash run.sh setup)"


class VadUnavailable(RuntimeError):
    """The Silero VAD graph is not installed: the message says what to install."""


@dataclass(frozen=True)
class SpeechSegment:
    start_s: float
    end_s: float


def bundled_model_path() -> Path:
    """The Silero VAD ONNX file inside the installed ``silero-vad`` package."""
    # Found, not imported: importing silero_vad imports torch (1.5 s), and a refusal needs none of it.
    spec = find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise VadUnavailable(f"Silero VAD is not installed; run: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / MODEL_FILE
    if not path.is_file():
        raise VadUnavailable(f"{path} is missing from the silero-vad package; reinstall it: {INSTALL_HINT}")
    return path


class SpeechDetector:
    """Owns one Silero VAD onnxruntime session (one thread; calls are serialised by a lock)."""

    def __init__(self, model_path: str | Path | None = None):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            str(model_path or bundled_model_path()), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._lock = threading.Lock()

    def probabilities(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """(W,) speech probability of each 32 ms window of mono ``samples`` (the last partial window padded)."""
        wave = _to_16k(samples, sample_rate)
        windows = -(-len(wave) // WINDOW)
        padded = np.zeros(windows * WINDOW + CONTEXT, dtype=np.float32)
        padded[CONTEXT : CONTEXT + len(wave)] = wave
        state = np.zeros(STATE_SHAPE, dtype=np.float32)
        rate = np.array(VAD_RATE, dtype=np.int64)
        result = np.empty(windows, dtype=np.float32)
        with self._lock:
            for index in range(windows):
                chunk = padded[index * WINDOW : (index + 1) * WINDOW + CONTEXT][None, :]
                output, state = self.session.run(None, {"input": chunk, "state": state, "sr": rate})
                result[index] = float(np.asarray(output).reshape(-1)[0])
        return result

    def segments(
        self,
        samples: np.ndarray,
        sample_rate: int,
        threshold: float = 0.5,
        min_speech_s: float = 0.1,
        min_silence_s: float = 0.3,
    ) -> list[SpeechSegment]:
        """Speech segments (seconds from the start) of mono ``samples``."""
        window_s = WINDOW / VAD_RATE
        found, start, quiet_since = [], None, None
        for index, probability in enumerate(self.probabilities(samples, sample_rate)):
            if start is None:
                if probability >= threshold:
                    start, quiet_since = index, None
            elif probability < threshold - 0.15:
                quiet_since = index if quiet_since is None else quiet_since
                if (index - quiet_since + 1) * window_s >= min_silence_s:
                    found.append((start, quiet_since))
                    start, quiet_since = None, None
            else:
                quiet_since = None
        if start is not None:
            found.append((start, quiet_since if quiet_since is not None else index + 1))
        duration = len(samples) / sample_rate
        return [
            SpeechSegment(begin * window_s, min(end * window_s, duration))
            for begin, end in found
            if (end - begin) * window_s >= min_speech_s
        ]

    def speech_span(self, samples: np.ndarray, sample_rate: int, pad_s: float = 0.1) -> tuple[float, float] | None:
        """(start, end) seconds from the first speech to the last, widened by ``pad_s``; None if no speech."""
        found = self.segments(samples, sample_rate)
        if not found:
            return None
        duration = len(samples) / sample_rate
        return max(0.0, found[0].start_s - pad_s), min(duration, found[-1].end_s + pad_s)

    def trim(self, samples: np.ndarray, sample_rate: int, pad_s: float = 0.1) -> np.ndarray:
        """``samples`` without the silence before the first and after the last speech (unchanged if no
        speech is found: the caller decides whether a recording without speech is an error)."""
        span = self.speech_span(samples, sample_rate, pad_s)
        if span is None:
            return samples
        return samples[round(span[0] * sample_rate) : round(span[1] * sample_rate)]


def too_little_speech(segments: list[SpeechSegment]) -> bool:
    """The rule a recording to convert and a voice prompt share: less than ``MIN_CONVERT_SPEECH_SECONDS`` of
    speech heard (a pure tone, noise, music, a click) is not someone speaking."""
    return sum(segment.end_s - segment.start_s for segment in segments) < MIN_CONVERT_SPEECH_SECONDS


def hears_speech(samples: np.ndarray, sample_rate: int, detector: SpeechDetector | None = None) -> bool:
    """Whether ``detector`` (None: the process's shared one) hears someone speaking in (N,) or (N, C) ``samples``."""
    samples = np.asarray(samples, dtype=np.float32)
    mono = samples.mean(axis=1) if samples.ndim == 2 else samples
    return not too_little_speech((detector or shared_detector()).segments(mono, sample_rate))


_shared: SpeechDetector | None = None
_shared_lock = threading.Lock()


def shared_detector() -> SpeechDetector:
    """One process-wide detector (the session is small, but loading it per prompt would waste time)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SpeechDetector()
        return _shared


def trim_silence(samples: np.ndarray, sample_rate: int, pad_s: float = 0.1) -> np.ndarray:
    """Mono ``samples`` with leading and trailing non-speech removed by Silero VAD."""
    return shared_detector().trim(np.asarray(samples, dtype=np.float32).reshape(-1), sample_rate, pad_s)


def _to_16k(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    wave = np.asarray(samples, dtype=np.float32).reshape(-1)
    if sample_rate != VAD_RATE:
        import soxr  # 0.1 s to import where scipy.signal takes 1.2 s, in every process that checks a prompt

        wave = soxr.resample(wave, int(sample_rate), VAD_RATE).astype(np.float32)
    return wave
