"""Voice recordings in, mono float32 waveforms out; or an error that tells the user what to fix.

Decoding: soundfile (libsndfile) reads WAV, FLAC, OGG/Vorbis/Opus and MP3; anything it cannot read goes
to audioread, which uses the platform's decoder (Core Audio on macOS, ffmpeg or GStreamer elsewhere)
for M4A/AAC. Channels are averaged and the samples resampled with the project's torchaudio-equal
resampler, as upstream ``load_wav`` does.

Prompt clean-up (``trim_silence`` / ``normalize``, both on by default) is the older upstream webui's
``postprocess``: ``librosa.effects.trim(top_db=60, frame_length=440, hop_length=220)`` on the 16 kHz
signal, scale down to a 0.8 peak if louder, append 0.2 s of silence. The span kept is found once on the
16 kHz signal and cut at the same instants at any other rate, so 16 kHz and 24 kHz loads of one file
hold the same speech.

Content hash: SHA-256 of the decoded, mono, 16 kHz samples BEFORE trimming and normalising, rounded to
int16. It depends only on the recording: a WAV and a FLAC of the same PCM hash the same, and changing the
clean-up options does not change it. (Lossy re-encodings such as MP3 are different recordings.)
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile
import torch

from cosyvoice_mac.errors import InputError
from cosyvoice_mac.frontend.resample import resample
from cosyvoice_mac.prompt_limits import (
    MAX_FILE_SECONDS,
    MAX_SECONDS,
    MIN_SECONDS,
    MIN_SOURCE_SAMPLE_RATE,
    NORMALIZED_PEAK,
    PLATFORM_DECODER_SUFFIXES,
    SILENT_PEAK,
    TAIL_SECONDS,
    TOKENIZER_SAMPLE_RATE,
    TRIM_FRAME_LENGTH,
    TRIM_HOP_LENGTH,
    TRIM_TOP_DB,
)
from cosyvoice_mac.sound import sound_bounds

REASONS = (
    "not_audio",
    "empty",
    "silent",
    "too_short",
    "too_long",
    "unreadable",
    "low_sample_rate",
    "odd_sample_rate",
    "no_decoder",
)
# The exact resampler's filter bank grows with (rate / gcd) x (target / gcd); standard rates keep it tiny,
# while a rate like 44101 Hz would need gigabytes. Past this many taps we ask for a re-export instead.
MAX_RESAMPLE_FILTER_TAPS = 4_000_000


class AudioInputError(InputError):
    """An audio file we cannot use as a voice prompt. ``reason`` is one of REASONS; ``str()`` is for the user."""

    def __init__(self, reason: str, message: str):
        if reason not in REASONS:
            raise ValueError(f"unknown AudioInputError reason {reason!r}")
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class LoadedAudio:
    """One recording ready for the models, and the hash that identifies the recording itself.

    wave: (1, N) float32 mono at ``sample_rate``.
    """

    wave: torch.Tensor
    sample_rate: int
    content_hash: str
    source_sample_rate: int

    @property
    def seconds(self) -> float:
        return self.wave.shape[-1] / self.sample_rate


def load_audio(
    path: str | Path,
    sample_rate: int = TOKENIZER_SAMPLE_RATE,
    *,
    trim_silence: bool = True,
    normalize: bool = True,
    min_seconds: float | None = MIN_SECONDS,
    max_seconds: float | None = MAX_SECONDS,
) -> LoadedAudio:
    """Load a voice prompt as mono float32 at ``sample_rate``; raise AudioInputError when it is unusable.

    ``min_seconds`` applies to the speech kept (after trimming); ``max_seconds`` to the returned
    audio, including the 0.2 s tail that ``normalize`` appends. ``None`` turns a limit off.
    """
    return decode_prompt(path).at(
        sample_rate, trim_silence=trim_silence, normalize=normalize, min_seconds=min_seconds, max_seconds=max_seconds
    )


class DecodedPrompt:
    """One prompt recording, decoded once: every later step (the cache key, the 16 and 24 kHz loads, the
    speech span) reads it from here instead of decoding the file again.

    source: (1, N) float32 mono at ``source_rate``; wave_16k: the same at 16 kHz (hash and trimming).
    """

    def __init__(self, source: torch.Tensor, source_rate: int, name: str):
        if source_rate < MIN_SOURCE_SAMPLE_RATE:
            raise AudioInputError(
                "low_sample_rate",
                f"{name} is sampled at {source_rate} Hz; a voice prompt needs at least {MIN_SOURCE_SAMPLE_RATE} Hz "
                "(phone-quality audio lacks the high frequencies the model listens to). Record or export it at "
                "16 kHz or higher.",
            )
        _check_resampleable(name, source_rate, TOKENIZER_SAMPLE_RATE)
        self.source, self.source_rate, self.name = source, source_rate, name
        self.wave_16k = resample(source, source_rate, TOKENIZER_SAMPLE_RATE)
        if self.wave_16k.abs().max().item() < SILENT_PEAK:
            raise AudioInputError(
                "silent",
                f"{name} is silent (its loudest sample is below -60 dBFS). Check the microphone and record again.",
            )
        self.content_hash = audio_content_hash(self.wave_16k)
        self._span: tuple[float, float] | None = None

    @property
    def speech_span(self) -> tuple[float, float]:
        """Start and end (seconds) of the sound, found once on the 16 kHz wave."""
        if self._span is None:
            self._span = _speech_span(self.wave_16k)
        return self._span

    def at(
        self,
        sample_rate: int,
        *,
        trim_silence: bool = True,
        normalize: bool = True,
        min_seconds: float | None = MIN_SECONDS,
        max_seconds: float | None = MAX_SECONDS,
    ) -> LoadedAudio:
        """The prompt at ``sample_rate``, cleaned up and checked as ``load_audio`` documents."""
        _check_resampleable(self.name, self.source_rate, sample_rate)
        wave = (
            self.wave_16k
            if sample_rate == TOKENIZER_SAMPLE_RATE
            else resample(self.source, self.source_rate, sample_rate)
        )
        if trim_silence:
            start_s, end_s = self.speech_span
            wave = wave[:, round(start_s * sample_rate) : round(end_s * sample_rate)]
        speech_seconds = wave.shape[-1] / sample_rate
        tail = round(TAIL_SECONDS * sample_rate) if normalize else 0
        trimmed_note = " after trimming silence" if trim_silence else ""
        if min_seconds is not None and speech_seconds < min_seconds:
            raise AudioInputError(
                "too_short",
                f"{self.name} holds only {speech_seconds:.1f} s of sound{trimmed_note}; a voice prompt needs at "
                f"least {min_seconds:g} s (3-10 s of clear speech works best). Record a longer sample.",
            )
        if max_seconds is not None and (wave.shape[-1] + tail) / sample_rate > max_seconds:
            limit = max_seconds - tail / sample_rate
            raise AudioInputError(
                "too_long",
                f"{self.name} is {speech_seconds:.1f} s long{trimmed_note}; the model takes at most {limit:g} s of "
                "prompt speech. Cut it to one clear sentence or a few (5-15 s is plenty).",
            )
        if normalize:
            peak = wave.abs().max()
            if peak > NORMALIZED_PEAK:
                wave = wave / peak * NORMALIZED_PEAK
            wave = torch.cat([wave, wave.new_zeros(1, tail)], dim=1)
        return LoadedAudio(wave.contiguous(), sample_rate, self.content_hash, self.source_rate)


def decode_prompt(prompt, sample_rate: int | None = None) -> DecodedPrompt:
    """A prompt file (path), mono or (N, channels) samples at ``sample_rate``, or an already decoded prompt,
    as a DecodedPrompt; AudioInputError when it cannot be a voice prompt."""
    if isinstance(prompt, DecodedPrompt):
        return prompt
    if isinstance(prompt, np.ndarray):
        if not sample_rate or sample_rate <= 0:
            raise AudioInputError("not_audio", "prompt samples were given without their sample rate")
        samples = np.asarray(prompt, dtype=np.float32)
        samples = samples.reshape(-1, 1) if samples.ndim == 1 else samples  # (N, channels)
        if samples.shape[0] == 0:
            raise AudioInputError("empty", "the recording contains no audio samples. Record it again.")
        if not np.isfinite(samples).all():
            raise AudioInputError("not_audio", "the recording holds invalid samples (NaN or infinity).")
        wave = torch.from_numpy(np.ascontiguousarray(samples.T)).mean(dim=0, keepdim=True)
        return DecodedPrompt(wave, int(sample_rate), "the recording")
    path = Path(prompt)
    wave, rate = decode_audio(path)
    return DecodedPrompt(wave, rate, path.name)


def decode_audio(path: str | Path) -> tuple[torch.Tensor, int]:
    """Decode a file to ``((1, N) float32 mono in [-1, 1], file sample rate)``; AudioInputError if impossible."""
    path = Path(path)
    _check_readable(path)
    try:
        samples, rate = _decode_with_soundfile(path)
    except AudioInputError:
        raise
    except Exception as soundfile_error:  # libsndfile raises several types on damaged or foreign data
        samples, rate = _decode_with_platform_decoder(path, soundfile_error)
    if samples.shape[0] == 0:
        raise AudioInputError("empty", f"{path.name} contains no audio samples. Record or export it again.")
    if not np.isfinite(samples).all():
        raise AudioInputError(
            "not_audio", f"{path.name} holds invalid samples (NaN or infinity); export it again as WAV or FLAC."
        )
    channels_first = torch.from_numpy(np.ascontiguousarray(samples.T))  # (C, N)
    return channels_first.mean(dim=0, keepdim=True), rate


def audio_content_hash(wave_16k: torch.Tensor) -> str:
    """SHA-256 (hex) of 16 kHz mono samples rounded to int16: equal for equal PCM in any container."""
    pcm = torch.round(wave_16k.detach().reshape(-1).to("cpu", torch.float32) * 32768.0).clamp(-32768, 32767)
    return hashlib.sha256(pcm.to(torch.int16).numpy().astype("<i2").tobytes()).hexdigest()


def write_wav(path: str | Path, wave: torch.Tensor | np.ndarray, sample_rate: int, subtype: str = "PCM_16") -> Path:
    """Write mono audio ``(N,)`` or ``(1, N)`` to ``path`` atomically (temp file + rename); clips to [-1, 1]."""
    path = Path(path)
    samples = wave.detach().to("cpu", torch.float32).numpy() if isinstance(wave, torch.Tensor) else np.asarray(wave)
    if samples.ndim == 2 and samples.shape[0] == 1:
        samples = samples[0]
    if samples.ndim != 1:
        raise ValueError(f"write_wav takes mono audio (N,) or (1, N), got shape {samples.shape}")
    samples = np.clip(np.nan_to_num(samples.astype(np.float32)), -1.0, 1.0)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as temp_file:
            soundfile.write(temp_file, samples, sample_rate, subtype=subtype, format="WAV")
            temp_file.flush()
            os.fsync(temp_file.fileno())
        os.chmod(temp_name, 0o644)  # mkstemp makes 0600 files; outputs are ordinary documents
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
    return path


def _check_readable(path: Path) -> None:
    try:
        with path.open("rb") as handle:
            first_byte = handle.read(1)
    except FileNotFoundError:
        raise AudioInputError("unreadable", f"{path} does not exist. Check the file name and try again.") from None
    except IsADirectoryError:
        raise AudioInputError("unreadable", f"{path} is a folder, not an audio file. Pick a file inside it.") from None
    except OSError as error:
        raise AudioInputError(
            "unreadable",
            f"{path} cannot be read ({error.strerror or error}). Check its permissions or copy it locally.",
        ) from error
    if not first_byte:
        raise AudioInputError("empty", f"{path.name} is an empty file (0 bytes). Record or export it again.")


def _decode_with_soundfile(path: Path) -> tuple[np.ndarray, int]:
    with soundfile.SoundFile(str(path)) as audio_file:
        rate = audio_file.samplerate
        if audio_file.frames > MAX_FILE_SECONDS * rate:
            raise _file_too_long(path, audio_file.frames / rate)
        return audio_file.read(dtype="float32", always_2d=True), rate  # (N, C)


def _decode_with_platform_decoder(path: Path, soundfile_error: Exception) -> tuple[np.ndarray, int]:
    """audioread yields 16-bit little-endian interleaved PCM from whichever decoder this machine has."""
    import audioread

    platform_decoders = [b for b in audioread.available_backends() if b.__name__ != "RawAudioFile"]
    if path.suffix.lower() in PLATFORM_DECODER_SUFFIXES and not platform_decoders:
        raise AudioInputError(
            "no_decoder",
            f"{path.name}: this machine has no decoder for {path.suffix} files. Install ffmpeg "
            "(macOS: brew install ffmpeg; Debian/Ubuntu: sudo apt-get install ffmpeg) or save the recording "
            "as WAV, FLAC or MP3.",
        ) from soundfile_error
    try:
        with audioread.audio_open(str(path)) as audio_file:
            rate, channels = int(audio_file.samplerate), int(audio_file.channels)
            if audio_file.duration > MAX_FILE_SECONDS:
                raise _file_too_long(path, audio_file.duration)
            pcm = b"".join(audio_file)
    except AudioInputError:
        raise
    except Exception as error:
        raise AudioInputError(
            "not_audio",
            f"{path.name} is not an audio file this app can read (expected WAV, FLAC, OGG, MP3 or M4A). "
            "Export the recording as WAV and try again.",
        ) from error
    if channels < 1 or rate < 1:
        raise AudioInputError("not_audio", f"{path.name} reports {channels} channels at {rate} Hz; export it as WAV.")
    usable = len(pcm) - len(pcm) % (2 * channels)
    samples = np.frombuffer(pcm[:usable], dtype="<i2").astype(np.float32) / 32768.0
    return samples.reshape(-1, channels), rate


def _check_resampleable(name: str, source_rate: int, target_rate: int) -> None:
    divisor = math.gcd(source_rate, target_rate)
    if (source_rate // divisor) * (target_rate // divisor) > MAX_RESAMPLE_FILTER_TAPS:
        raise AudioInputError(
            "odd_sample_rate",
            f"{name} uses an unusual sample rate ({source_rate} Hz) that cannot be converted to "
            f"{target_rate} Hz efficiently. Export it at a standard rate such as 16000, 44100 or 48000 Hz.",
        )


def _file_too_long(path: Path, seconds: float) -> AudioInputError:
    return AudioInputError(
        "too_long",
        f"{path.name} is {seconds:.0f} s long; a voice prompt may be at most {MAX_SECONDS:g} s. "
        "Cut out one clear passage of 5-15 s.",
    )


def _speech_span(wave_16k: torch.Tensor) -> tuple[float, float]:
    """Start and end (seconds) of the sound in a 16 kHz (1, N) wave, as upstream's librosa trim finds it."""
    start, end = sound_bounds(wave_16k[0].numpy(), TRIM_TOP_DB, TRIM_FRAME_LENGTH, TRIM_HOP_LENGTH)
    return start / TOKENIZER_SAMPLE_RATE, end / TOKENIZER_SAMPLE_RATE
