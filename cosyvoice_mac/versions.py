"""What differs between CosyVoice2 and CosyVoice3, on one screen.

A model folder's YAML names its version once (``pipeline.model_dir.detect_version``); every part that
behaves differently reads its row of this table instead of testing ``version == ...`` itself. ``S`` is
the speech-token count (6561 for both released models); ids at or above ``S`` are special rows.

| what                          | cosyvoice2                             | cosyvoice3                          |
|-------------------------------|----------------------------------------|-------------------------------------|
| speech-id rows after S        | 3                                      | 200                                 |
| SOS / TASK_ID rows            | llm_embedding 0 / 1                    | speech_embedding S / S+2            |
| end of speech / stop ids      | S / {S, S+1, S+2}                      | S+1 / every id >= S                 |
| silent ids filtered in runs   | none                                   | 11 breath/silence ids               |
| token front end of the flow   | upsampling conformer + U-Net estimator | pre-lookahead conv + DiT estimator  |
| streaming stitcher            | cross-fade with cached source          | causal vocoder with a finalise step |
| vocoder excitation noise      | random: seeded per sentence            | fixed (the model's own)             |
| system prefix / <endofprompt> | none / optional                        | "You are a helpful assistant." / required |
| pinyin and ARPAbet markup     | no                                     | yes                                 |
| speech tokenizer file         | speech_tokenizer_v2.onnx               | speech_tokenizer_v3.onnx            |

Torch-free: the page and the CLI may read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cosyvoice_mac.frontend.special_tokens import ENDOFPROMPT, SYSTEM_PROMPT

COSYVOICE3_SILENT_TOKENS = (1, 2, 28, 29, 55, 248, 494, 2241, 2242, 2322, 2323)  # models/llm keeps its own copy


@dataclass(frozen=True)
class VersionSpec:
    """One model version's differences (see the table above); methods give ids for a speech-token count S."""

    name: str
    hub_repo: str
    speech_tokenizer_file: str
    extra_speech_ids: int  # rows of the speech vocabulary after the S real tokens
    specials_in_llm_embedding: bool  # SOS/TASK_ID live in a 2-row llm_embedding (v2), not speech_embedding
    stop_on_every_special: bool  # every id >= S ends decoding (v3), not only S..S+2
    silent_ids: tuple[int, ...]
    flow_front: str  # "conformer" (v2) or "pre_lookahead" (v3)
    stitcher: str  # "crossfade" (v2) or "causal" (v3)
    random_vocoder_noise: bool  # the vocoder's excitation is random, so seeded per sentence
    system_prefix: str  # put before the prompt text of every request
    needs_endofprompt: bool  # the LLM refuses input without <|endofprompt|>
    pronunciation_markup: bool  # pinyin and ARPAbet units are tokens

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
    speech_tokenizer_file="speech_tokenizer_v2.onnx",
    extra_speech_ids=3,
    specials_in_llm_embedding=True,
    stop_on_every_special=False,
    silent_ids=(),
    flow_front="conformer",
    stitcher="crossfade",
    random_vocoder_noise=True,
    system_prefix="",
    needs_endofprompt=False,
    pronunciation_markup=False,
)
COSYVOICE3 = VersionSpec(
    name="cosyvoice3",
    hub_repo="FunAudioLLM/Fun-CosyVoice3-0.5B-2512",
    speech_tokenizer_file="speech_tokenizer_v3.onnx",
    extra_speech_ids=200,
    specials_in_llm_embedding=False,
    stop_on_every_special=True,
    silent_ids=COSYVOICE3_SILENT_TOKENS,
    flow_front="pre_lookahead",
    stitcher="causal",
    random_vocoder_noise=False,
    system_prefix=SYSTEM_PROMPT + ENDOFPROMPT,
    needs_endofprompt=True,
    pronunciation_markup=True,
)
SPECS = {spec.name: spec for spec in (COSYVOICE3, COSYVOICE2)}
VERSIONS = tuple(SPECS)  # newest first


def spec_for(version: str) -> VersionSpec:
    """The spec of ``version``; ValueError naming the known ones otherwise."""
    try:
        return SPECS[version]
    except KeyError:
        raise ValueError(f"unknown model version {version!r}; known: {', '.join(VERSIONS)}") from None
