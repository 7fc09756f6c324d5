"""What differs between CosyVoice2 and CosyVoice3, on one screen.

A model folder's YAML names its version once (``pipeline.model_dir.detect_version``); every part that
behaves differently reads its row of this table instead of testing ``version == ...`` itself. ``S`` is
the speech-token count (6561 for both released models); ids at or above ``S`` are special rows.

| what                          | cosyvoice2                             | cosyvoice3                                |
|-------------------------------|----------------------------------------|-------------------------------------------|
| YAML classes: llm / flow      | Qwen2LM / CausalMaskedDiffWithXvec     | CosyVoice3LM / CausalMaskedDiffWithDiT    |
| YAML class: hift (vocoder)    | HiFTGenerator (non-causal convs)       | CausalHiFTGenerator (causal convs)        |
| speech-id rows after S        | 3                                      | 200                                       |
| SOS / TASK_ID rows            | llm_embedding 0 / 1                    | speech_embedding S / S+2                  |
| end of speech / stop ids      | S / {S, S+1, S+2}                      | S+1 / every id >= S                       |
| bias on the llm_decoder       | yes                                    | no                                        |
| silent ids filtered in runs   | none                                   | 11 breath/silence ids                     |
| token front end of the flow   | upsampling conformer + U-Net estimator | pre-lookahead conv + DiT estimator        |
| streaming stitcher            | cross-fade with cached source          | causal vocoder with a finalise step       |
| vocoder excitation noise      | random: seeded per sentence            | fixed (the model's own)                   |
| system prefix / <endofprompt> | none / optional                        | "You are a helpful assistant." / required |
| pinyin and ARPAbet markup     | no                                     | yes                                       |
| speech tokenizer file         | speech_tokenizer_v2.onnx               | speech_tokenizer_v3.onnx                  |
| RL-tuned llm.rl.pt published  | no                                     | yes                                       |
| stages on the MLX engine      | llm, flow, hift                        | llm, flow, hift                           |
| audio out, prompt mel         | 24 kHz (SAMPLE_RATE)                   | 24 kHz (SAMPLE_RATE)                      |

The speech LM and the flow get their row from the YAML class of their own section
(:func:`spec_for_class`), so a network never asks which version it is: it reads flags and ids.

Torch-free: the page and the CLI may read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cosyvoice_mac.config import ConfigError

# The two prompt strings the text frontend puts between an instruction (or CosyVoice3's system sentence) and
# the text; part of what differs between the versions (system_prefix below), so they live here.
ENDOFPROMPT = "<|endofprompt|>"
SYSTEM_PROMPT = "You are a helpful assistant."  # v3 system sentence that precedes the instruction/marker
PRE_LOOKAHEAD, CONFORMER = "pre_lookahead", "conformer"  # the flow's token front ends (flow_front)
SAMPLE_RATE = 24000  # Hz: both versions' output audio and the flow's prompt mel (the YAML's, where it says)
MLX_STAGES = ("llm", "flow", "hift")  # the three networks; the MLX engine runs a model only when it has all
COSYVOICE3_SILENT_TOKENS = (1, 2, 28, 29, 55, 248, 494, 2241, 2242, 2322, 2323)
# The inline style tags (``(happy)``, frontend/inline.py) as each version's instruct mode was trained to read
# them: CosyVoice3 its instruction presets (frontend/special_tokens.INSTRUCTIONS), CosyVoice2 instruct2's
# "用…的语气说这句话" form. Both versions know the same style names.
COSYVOICE3_STYLES = (
    ("happy", "请非常开心地说一句话。"),
    ("sad", "请非常伤心地说一句话。"),
    ("angry", "请非常生气地说一句话。"),
    ("whisper", "Please say a sentence in a very soft voice."),
    ("loud", "Please say a sentence as loudly as possible."),
    ("slow", "请用尽可能慢地语速说一句话。"),
    ("fast", "请用尽可能快地语速说一句话。"),
)
COSYVOICE2_STYLES = (
    ("happy", "用开心的语气说这句话"),
    ("sad", "用伤心的语气说这句话"),
    ("angry", "用生气的语气说这句话"),
    ("whisper", "用耳语的方式轻声说这句话"),
    ("loud", "用很大的声音说这句话"),
    ("slow", "用很慢的语速说这句话"),
    ("fast", "用很快的语速说这句话"),
)
STYLE_NAMES = tuple(name for name, _ in COSYVOICE3_STYLES)  # the inline style tags every version knows


@dataclass(frozen=True)
class VersionSpec:
    """One model version's differences (see the table above); methods give ids for a speech-token count S."""

    name: str
    hub_repo: str
    llm_class: str  # the YAML tag of the llm: section
    flow_class: str  # the YAML tag of the flow: section
    hift_class: str  # the YAML tag of the hift: section (the vocoder reads its causal flag from its class)
    speech_tokenizer_file: str
    extra_speech_ids: int  # rows of the speech vocabulary after the S real tokens
    specials_in_llm_embedding: bool  # SOS/TASK_ID live in a 2-row llm_embedding (v2), not speech_embedding
    stop_on_every_special: bool  # every id >= S ends decoding (v3), not only S..S+2
    llm_decoder_bias: bool  # the llm_decoder Linear has a bias (v2)
    silent_ids: tuple[int, ...]
    flow_front: str  # CONFORMER (v2) or PRE_LOOKAHEAD (v3)
    stitcher: str  # "crossfade" (v2) or "causal" (v3)
    random_vocoder_noise: bool  # the vocoder's excitation is random, so seeded per sentence
    system_prefix: str  # put before the prompt text of every request
    needs_endofprompt: bool  # the LLM refuses input without <|endofprompt|>
    pronunciation_markup: bool  # pinyin and ARPAbet units are tokens
    rl_llm: bool  # the hub publishes an RL-tuned llm.rl.pt beside llm.pt
    mlx_stages: tuple[str, ...]  # the networks cosyvoice_mac.mlx runs for this version (of MLX_STAGES)
    style_instructions: tuple[tuple[str, str], ...] = ()  # an inline (style) tag -> the instruction it becomes

    def style_instruction(self, style: str) -> str | None:
        """The instruction this version reads for the inline style tag ``(style)``; None for a style it lacks."""
        return dict(self.style_instructions).get(style)

    @property
    def mlx_engine(self) -> bool:
        """True when every stage runs on MLX: the engine runs a model whole, never split across two engines."""
        return set(self.mlx_stages) == set(MLX_STAGES)

    def speech_vocab_size(self, speech_token_size: int) -> int:
        return speech_token_size + self.extra_speech_ids

    def sos(self, speech_token_size: int) -> int:
        return 0 if self.specials_in_llm_embedding else speech_token_size

    def task_id(self, speech_token_size: int) -> int:
        return 1 if self.specials_in_llm_embedding else speech_token_size + 2

    def eos(self, speech_token_size: int) -> int:
        return speech_token_size + (0 if self.specials_in_llm_embedding else 1)

    def stop_ids(self, speech_token_size: int) -> frozenset[int]:
        end = self.speech_vocab_size(speech_token_size) if self.stop_on_every_special else speech_token_size + 3
        return frozenset(range(speech_token_size, end))


COSYVOICE2 = VersionSpec(
    name="cosyvoice2",
    hub_repo="FunAudioLLM/CosyVoice2-0.5B",
    llm_class="Qwen2LM",
    flow_class="CausalMaskedDiffWithXvec",
    hift_class="HiFTGenerator",
    speech_tokenizer_file="speech_tokenizer_v2.onnx",
    extra_speech_ids=3,
    specials_in_llm_embedding=True,
    stop_on_every_special=False,
    llm_decoder_bias=True,
    silent_ids=(),
    flow_front=CONFORMER,
    stitcher="crossfade",
    random_vocoder_noise=True,
    system_prefix="",
    needs_endofprompt=False,
    pronunciation_markup=False,
    rl_llm=False,
    mlx_stages=MLX_STAGES,
    style_instructions=COSYVOICE2_STYLES,
)
COSYVOICE3 = VersionSpec(
    name="cosyvoice3",
    hub_repo="FunAudioLLM/Fun-CosyVoice3-0.5B-2512",
    llm_class="CosyVoice3LM",
    flow_class="CausalMaskedDiffWithDiT",
    hift_class="CausalHiFTGenerator",
    speech_tokenizer_file="speech_tokenizer_v3.onnx",
    extra_speech_ids=200,
    specials_in_llm_embedding=False,
    stop_on_every_special=True,
    llm_decoder_bias=False,
    silent_ids=COSYVOICE3_SILENT_TOKENS,
    flow_front=PRE_LOOKAHEAD,
    stitcher="causal",
    random_vocoder_noise=False,
    system_prefix=SYSTEM_PROMPT + ENDOFPROMPT,
    needs_endofprompt=True,
    pronunciation_markup=True,
    rl_llm=True,
    mlx_stages=MLX_STAGES,
    style_instructions=COSYVOICE3_STYLES,
)
SPECS = {spec.name: spec for spec in (COSYVOICE3, COSYVOICE2)}
VERSIONS = tuple(SPECS)  # newest first


def spec_for(version: str) -> VersionSpec:
    """The spec of ``version``; ValueError naming the known ones otherwise."""
    try:
        return SPECS[version]
    except KeyError:
        raise ValueError(f"unknown model version {version!r}; known: {', '.join(VERSIONS)}") from None


def spec_for_class(yaml_class: str, section: str) -> VersionSpec:
    """The spec whose ``section`` ("llm", "flow" or "hift") has YAML class ``yaml_class``; ConfigError otherwise."""
    for spec in SPECS.values():
        if getattr(spec, f"{section}_class") == yaml_class:
            return spec
    known = " or ".join(getattr(spec, f"{section}_class") for spec in SPECS.values())
    raise ConfigError(f"{section} class {yaml_class or '(untagged)'!r} is not supported; expected {known}")
