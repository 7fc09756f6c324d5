"""Turn a request (text, transcript, instruction) into the LLM's text inputs for each mode (spec 8.1).

Every mode feeds the flow the prompt's tokens and mel; they differ in what the LLM sees:
zero-shot: transcript + text, with the prompt's speech tokens; cross-lingual: the text only;
instruct: the instruction as the "prompt text", no prompt speech tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

from cosyvoice_mac.frontend.markup import build_llm_text, validate_markup
from cosyvoice_mac.pipeline.types import SynthesisError

MAX_TEXT_CHARACTERS = 10_000
MAX_INSTRUCT_CHARACTERS = 500
SPEED_RANGE = (0.5, 2.0)


@dataclass(frozen=True)
class Segment:
    """One sentence group: what the LLM reads and what a person would call its text."""

    llm_text: str
    display_text: str


@dataclass(frozen=True)
class RequestPlan:
    mode: str  # "zero_shot" | "cross_lingual" | "instruct"
    segments: list[Segment]
    llm_prompt_text: str
    speed: float


def plan_request(model, text, *, prompt_text, instruct, speed, has_prompt: bool) -> RequestPlan:
    """Validate a request and build its LLM texts; SynthesisError names what to fix."""
    if not has_prompt:
        raise SynthesisError("a prompt voice is needed: upload or record 3-30 s of speech, or pick a saved voice")
    if not isinstance(text, str) or not text.strip():
        raise SynthesisError("there is no text to speak: type the text to synthesise")
    if len(text) > MAX_TEXT_CHARACTERS:
        raise SynthesisError(
            f"the text has {len(text):,} characters; one request takes at most {MAX_TEXT_CHARACTERS:,}. "
            "Split it into several requests."
        )
    try:
        speed = float(speed)
    except (TypeError, ValueError):
        raise SynthesisError(f"speed must be a number, got {speed!r}") from None
    if not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
        raise SynthesisError(f"speed must be between {SPEED_RANGE[0]} and {SPEED_RANGE[1]}, got {speed}")
    instruct = (instruct or "").strip()
    prompt_text = (prompt_text or "").strip()
    if len(instruct) > MAX_INSTRUCT_CHARACTERS:
        raise SynthesisError(f"the instruction is longer than {MAX_INSTRUCT_CHARACTERS} characters; shorten it")
    mode = "instruct" if instruct else "zero_shot" if prompt_text else "cross_lingual"

    version = model.version
    validate_markup(text, version)  # before normalisation, which could rewrite an unknown unit
    sentences = model.normalizer.normalize(text, split=True)
    if not sentences:
        raise SynthesisError("the text has nothing to speak (only punctuation or symbols)")
    transcript = ""
    if mode == "zero_shot":
        validate_markup(prompt_text, version)
        transcript = "".join(model.normalizer.normalize(prompt_text, split=False))
    texts = [build_llm_text(mode, version, sentence, transcript, instruct) for sentence in sentences]
    segments = [Segment(llm.text, sentence) for llm, sentence in zip(texts, sentences)]
    return RequestPlan(mode=mode, segments=segments, llm_prompt_text=texts[0].prompt_text, speed=speed)
