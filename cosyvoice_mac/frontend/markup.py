"""Inline markup checks and where each mode puts the text (spec 4.2, 8.1).

``validate_markup`` refuses bracket/angle markup the model's tokenizer does not know (a typo such as
``[zz][qq]`` would otherwise reach the LLM as plain characters); ``build_llm_text`` places the
CosyVoice3 system prefix and the instruction for each mode.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass

from cosyvoice_mac.errors import SynthesisError
from cosyvoice_mac.frontend.special_tokens import (
    ARPABET_PHONES,
    EOS_TOKEN,
    PARALINGUISTIC_TOKENS,
    PINYIN_UNITS,
    QWEN_CHAT_TOKENS,
    SPECIAL_TOKENS,
)
from cosyvoice_mac.request import MODES
from cosyvoice_mac.versions import ENDOFPROMPT, SYSTEM_PROMPT, VERSIONS, spec_for

# ---------------------------------------------------------------------------------------------- markup

_BRACKET_RUN = re.compile(r"(?:\[[^\[\]\s]{1,24}\])+")
_BRACKET_GROUP = re.compile(r"\[([^\[\]\s]{1,24})\]")
_ANGLE_TAG = re.compile(r"</?[a-z][a-z_-]*>")
_PIPE_TAG = re.compile(r"<\|[^<>|\s]{1,32}\|>")
_TONE_MARKS = frozenset("āáǎàēéěèīíǐìōóǒòūúǔùǖǘǚǜü")
_ARPABET_WITH_STRESS = re.compile(r"[A-Z]{1,2}[0-2]")
_TAG_LIKE = re.compile(r"[a-z][a-z_-]+")
_PHONETIC = frozenset(t[1:-1] for t in ARPABET_PHONES + PINYIN_UNITS)
_RESERVED = frozenset((EOS_TOKEN,) + QWEN_CHAT_TOKENS)
_TAGS = tuple(t for t in PARALINGUISTIC_TOKENS if t != ENDOFPROMPT)


def _single_group_is_markup(content: str) -> bool:
    return (
        (content in _PHONETIC and len(content) >= 2)
        or _TAG_LIKE.fullmatch(content) is not None
        or _ARPABET_WITH_STRESS.fullmatch(content) is not None
        or (any(c in _TONE_MARKS for c in content) and content.isalpha())
    )


def find_unknown_markup(text: str, version: str) -> list[tuple[int, str]]:
    """``(character offset, unit)`` of every markup-shaped unit that ``version``'s tokenizer does not know."""
    if version not in VERSIONS:
        raise SynthesisError(f"unknown model version {version!r}; expected one of {VERSIONS}")
    text = unicodedata.normalize("NFC", text)
    known = frozenset(SPECIAL_TOKENS[version]) - _RESERVED
    found = []
    for run in _BRACKET_RUN.finditer(text):
        groups = list(_BRACKET_GROUP.finditer(run.group()))
        if len(groups) >= 2:
            shaped = [g for g in groups if any(c.isalpha() for c in g.group(1))]
        else:
            shaped = [g for g in groups if _single_group_is_markup(g.group(1))]
        found += [(run.start() + g.start(), g.group()) for g in shaped if g.group() not in known]
    for tag in list(_ANGLE_TAG.finditer(text)) + list(_PIPE_TAG.finditer(text)):
        if tag.group() not in known:
            found.append((tag.start(), tag.group()))
    return sorted(found)


def validate_markup(text: str, version: str) -> None:
    """Raise SynthesisError naming every markup unit in ``text`` that the ``version`` model does not know.

    What counts as markup (anything else is prose and left alone):

    * ``<|...|>`` tags and lowercase ``<tag>`` / ``</tag>``; ``<|zh|>``-style language tags are not tokens in
      CosyVoice2/3 and ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` are reserved, so they are errors;
    * two or more adjacent ``[..]`` groups (``[h][ào]``, ``[zz][qq]``) whose contents contain a letter;
    * a single ``[..]`` group holding a lowercase tag-like word (``[breath]``, ``[pause]``, also ``[sic]``), a
      tone-marked pinyin unit (``[ào]``), an ARPAbet phone with stress (``[AY0]``) or any pinyin / ARPAbet
      unit of 2+ characters (``[AY]``, ``[ian]``).

    Prose such as ``[1]``, ``[citation needed]``, ``[Editor's note]``, ``[NOTE]`` or ``option [B]`` is not
    markup (but in CosyVoice3 a lone ``[B]`` or ``[a]`` is still read as a phone / pinyin unit).
    """
    unknown = find_unknown_markup(text, version)
    if not unknown:
        return
    listed = ", ".join(f"{unit} at character {offset}" for offset, unit in unknown[:12])
    more = f" and {len(unknown) - 12} more" if len(unknown) > 12 else ""
    hints = []
    for _, unit in unknown:
        close = difflib.get_close_matches(unit, [t for t in _TAGS if t[0] == unit[0]], n=1, cutoff=0.75)
        if close and f"did you mean {close[0]} instead of {unit}" not in hints:
            hints.append(f"did you mean {close[0]} instead of {unit}")
    advice = f"Known tags: {' '.join(_TAGS)}. "
    if spec_for(version).pronunciation_markup:
        advice += (
            "Pronunciation markup: pinyin initials and tone-marked finals such as [h][ào] (the 176 units "
            "in cosyvoice_mac.frontend.special_tokens.PINYIN_UNITS) and CMU ARPAbet phones such as "
            "[M][AY0][N][UW1][T] (ARPABET_PHONES). "
        )
    elif any(u[1:-1] in _PHONETIC or _ARPABET_WITH_STRESS.fullmatch(u[1:-1]) for _, u in unknown):
        advice += "Pinyin / ARPAbet pronunciation markup such as [h][ào] or [AY0] needs a CosyVoice3 model. "
    if any(u.startswith("<|") for _, u in unknown):
        advice += (
            "<|...|> tags other than <|endofprompt|> (language tags like <|en|> included) are not used "
            "by CosyVoice2/3: remove them. "
        )
    raise SynthesisError(
        f"Unknown markup in the text for {version}: {listed}{more}. "
        + (("; ".join(hints) + ". ") if hints else "")
        + advice
        + "To keep brackets as plain text, use parentheses instead.",
        field="text",
    )


# ------------------------------------------------------------------------------------------ mode formatting


@dataclass(frozen=True)
class LlmText:
    """What the LLM reads for one segment: ``prompt_text`` (tokenised first, may be empty) then ``text``."""

    prompt_text: str
    text: str


def system_prefix(version: str) -> str:
    """``"You are a helpful assistant.<|endofprompt|>"`` for CosyVoice3 (its LLM requires the marker), else ``""``."""
    return spec_for(version).system_prefix


def format_instruction(instruction: str, version: str) -> str:
    """Instruct-mode prompt text: v2 ``"<instruction><|endofprompt|>"``; v3 adds the system sentence first,
    as in training (``"You are a helpful assistant. 请用广东话表达。<|endofprompt|>"``). A string that already
    contains ``<|endofprompt|>`` is used as given."""
    instruction = instruction.strip()
    if not instruction:
        raise SynthesisError("instruct mode needs an instruction (e.g. 'Please speak very slowly.')", field="instruct")
    if ENDOFPROMPT in instruction:
        return instruction
    if spec_for(version).system_prefix and not instruction.startswith(SYSTEM_PROMPT):
        instruction = f"{SYSTEM_PROMPT} {instruction}"
    return instruction + ENDOFPROMPT


def build_llm_text(
    mode: str, version: str, segment: str, prompt_transcript: str = "", instruction: str = ""
) -> LlmText:
    """Where each mode puts the text (spec 8.1) and, for CosyVoice3, the system prefix (spec 4.2).

    zero_shot: prompt = [v3 prefix] + transcript of the prompt audio; cross_lingual: text = [v3 prefix] +
    segment; instruct: prompt = :func:`format_instruction`. ``segment`` and ``prompt_transcript`` should
    already be normalised (:meth:`TextNormalizer.normalize`); text already holding ``<|endofprompt|>`` gets
    no second prefix.
    """
    if mode not in MODES:
        raise SynthesisError(f"unknown mode {mode!r}; expected one of {MODES}")
    if version not in VERSIONS:
        raise SynthesisError(f"unknown model version {version!r}; expected one of {VERSIONS}")
    if not segment.strip():
        raise SynthesisError("nothing to synthesise: the text is empty", field="text")
    if mode == "zero_shot":
        if not prompt_transcript.strip():
            raise SynthesisError("zero-shot cloning needs the transcript of the prompt recording", field="transcript")
        prefix = "" if ENDOFPROMPT in prompt_transcript else system_prefix(version)
        return LlmText(prefix + prompt_transcript, segment)
    if mode == "cross_lingual":
        prefix = "" if ENDOFPROMPT in segment else system_prefix(version)
        return LlmText("", prefix + segment)
    return LlmText(format_instruction(instruction, version), segment)
