"""Takes you can trust: each sentence's audio checked against its text (``check``), made again with a new seed
when it fails (``retake``), and its words timed (``words``) and written as captions (``captions``).

The numbers the check judges by live in ``thresholds``. The recogniser is handed in (``check.Recogniser``): the
engine owns the Whisper model (``engine.asr``), this package only compares."""

from cosyvoice_mac.pipeline.takes.check import (
    FLAGGED,
    PASSED,
    RETAKEN,
    Heard,
    NoRecogniser,
    Recogniser,
    TakeVerdict,
    VoiceRates,
    Word,
    check_take,
)
from cosyvoice_mac.pipeline.takes.retake import TakeChoice, retake_until_passed

__all__ = [
    "FLAGGED",
    "PASSED",
    "RETAKEN",
    "Heard",
    "NoRecogniser",
    "Recogniser",
    "TakeChoice",
    "TakeVerdict",
    "VoiceRates",
    "Word",
    "check_take",
    "retake_until_passed",
]
