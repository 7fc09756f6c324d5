"""What a voice prompt must be, in one torch-free place: the worker (``frontend.prompt_audio``) enforces
these limits and the page, the API and the CLI (``sound.prompt_check``) answer early with the same numbers.
"""

from __future__ import annotations

TOKENIZER_SAMPLE_RATE = 16000  # the speech tokenizer's rate; hashes and trimming work at this rate
MIN_SOURCE_SAMPLE_RATE = 16000  # the prompt features need the band up to 8 kHz
MIN_SECONDS = 1.0
MAX_SECONDS = 30.0  # the speech tokenizer refuses longer prompts
MAX_FILE_SECONDS = 600.0  # longer files are refused before decoding, to bound memory
MAX_RESAMPLE_FILTER_TAPS = 4_000_000  # the exact resampler's filter bank past which a re-export is asked for
SILENT_PEAK = 1e-3  # -60 dBFS: nothing a microphone picked up on purpose

# A recording to convert into another voice (voice conversion): as long as a file may be, any common rate.
MIN_CONVERT_SAMPLE_RATE = 8000  # telephone audio converts: the tokenizer's 16 kHz copy is upsampled from it
MAX_CONVERT_SECONDS = MAX_FILE_SECONDS  # the reader refuses longer files before decoding them
MIN_CONVERT_SPEECH_SECONDS = 0.5  # less speech than this is a click or a breath, not words to re-speak

# Silence trimming, as upstream's webui ``postprocess``: librosa.effects.trim on the 16 kHz signal.
TRIM_TOP_DB = 60
TRIM_FRAME_LENGTH = 440  # samples at 16 kHz (27.5 ms)
TRIM_HOP_LENGTH = 220
NORMALIZED_PEAK = 0.8
TAIL_SECONDS = 0.2  # silence appended after trimming; it counts toward MAX_SECONDS


def prompt_length_problem(
    speech_seconds: float,
    tail_seconds: float = TAIL_SECONDS,
    *,
    min_seconds: float | None = MIN_SECONDS,
    max_seconds: float | None = MAX_SECONDS,
) -> tuple[str, float] | None:
    """The length verdict on a voice prompt, the one rule the worker (``frontend.prompt_audio``) enforces and the
    page, the API and the CLI (``sound.prompt_check``) answer early with: ``("too_short", limit)`` when less than
    ``min_seconds`` of speech is kept, ``("too_long", limit)`` when the speech and the silent tail appended
    after it pass ``max_seconds`` (the limit quoted is then the speech that fits), else None. A limit of
    None is off."""
    if min_seconds is not None and speech_seconds < min_seconds:
        return "too_short", min_seconds
    if max_seconds is not None and speech_seconds + tail_seconds > max_seconds:
        return "too_long", max_seconds - tail_seconds
    return None


# Containers libsndfile cannot read; only a platform decoder (Core Audio, ffmpeg, GStreamer) can.
PLATFORM_DECODER_SUFFIXES = frozenset({".m4a", ".mp4", ".aac", ".m4b", ".alac", ".wma", ".webm", ".amr", ".3gp"})
# What counts as an audio file where a folder or a set of uploads is sorted (a batch of recordings to convert):
# libsndfile's formats and the platform decoders'. Anything else is skipped with a note, never decoded.
AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aiff", ".aif", ".caf"}) | (
    PLATFORM_DECODER_SUFFIXES
)
