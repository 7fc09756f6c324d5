"""Flow matching: speech tokens -> 80-bin log-mel (CosyVoice2 conformer + U-Net, CosyVoice3 DiT)."""

from cosyvoice_mac.models.flow.cfm import (
    MAX_SECONDS,
    NOISE_FRAMES,
    CFMConfig,
    ConditionalFlowMatching,
    FlowInputError,
    fixed_start_noise,
)
from cosyvoice_mac.models.flow.dit import DiT, DiTConfig
from cosyvoice_mac.models.flow.flow import Flow, FlowConfig
from cosyvoice_mac.models.flow.lookahead import PreLookaheadLayer

__all__ = [
    "CFMConfig",
    "ConditionalFlowMatching",
    "DiT",
    "DiTConfig",
    "Flow",
    "FlowConfig",
    "FlowInputError",
    "MAX_SECONDS",
    "NOISE_FRAMES",
    "PreLookaheadLayer",
    "fixed_start_noise",
]
