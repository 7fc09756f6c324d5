"""HiFT vocoder of CosyVoice2 (``HiFTGenerator``) and Fun-CosyVoice3 (``CausalHiFTGenerator``): mel -> 24 kHz wave."""

from .hift import HiFT, HiFTConfig, load_hift
from .source import (
    FixedUniformSourceNoise,
    GaussianSourceNoise,
    RecordedSourceNoise,
    SourceNoise,
)

__all__ = [
    "FixedUniformSourceNoise",
    "GaussianSourceNoise",
    "HiFT",
    "HiFTConfig",
    "RecordedSourceNoise",
    "SourceNoise",
    "load_hift",
]
