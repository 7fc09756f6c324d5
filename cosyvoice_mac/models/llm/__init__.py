"""CosyVoice2/3 speech language model: Qwen2 backbone, speech-token decoding and sampling."""

from cosyvoice_mac.models.llm.batch_decoding import BatchLine, decode_batch
from cosyvoice_mac.models.llm.decoding import DecodeOptions, DecodeRunner
from cosyvoice_mac.models.llm.kv_cache import StaticKVCache
from cosyvoice_mac.models.llm.qwen2 import Qwen2Config, Qwen2Model
from cosyvoice_mac.models.llm.sampling import FULL, NUCLEUS, GreedySampler, RasSampler
from cosyvoice_mac.models.llm.speech_lm import (
    ENDOFPROMPT_ID,
    SpeechDecoder,
    SpeechLM,
    SpeechLMConfig,
    SpeechLMInputError,
    drop_long_silent_runs,
    filter_silent_runs,
    load_speech_lm,
)

__all__ = [
    "BatchLine",
    "DecodeOptions",
    "DecodeRunner",
    "ENDOFPROMPT_ID",
    "FULL",
    "NUCLEUS",
    "GreedySampler",
    "Qwen2Config",
    "Qwen2Model",
    "RasSampler",
    "SpeechDecoder",
    "SpeechLM",
    "SpeechLMConfig",
    "SpeechLMInputError",
    "StaticKVCache",
    "decode_batch",
    "drop_long_silent_runs",
    "filter_silent_runs",
    "load_speech_lm",
]
