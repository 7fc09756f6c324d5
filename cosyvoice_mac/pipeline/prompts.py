"""Turn a request (text, transcript, instruction) into the LLM's text inputs for each mode (spec 8.1).

Every mode feeds the flow the prompt's tokens and mel; they differ in what the LLM sees:
zero-shot: transcript + text, with the prompt's speech tokens; cross-lingual: the text only;
instruct: the instruction as the "prompt text", no prompt speech tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from cosyvoice_mac.frontend.markup import build_llm_text, validate_markup
from cosyvoice_mac.pipeline.types import SynthesisError
from cosyvoice_mac.request import Request


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


def plan_request(version: str, normalizer, request: Request) -> RequestPlan:
    """The LLM texts of a (valid) request for model ``version``, with ``normalizer`` splitting the sentences.

    The request's own rules were checked when it was built; what is left is what only the model's
    text front end can tell: markup this version does not know, or text that normalises to nothing.
    """
    mode, transcript = request.mode, ""
    validate_markup(request.text, version)  # before normalisation, which could rewrite an unknown unit
    sentences = normalizer.normalize(request.text, split=True)
    if not sentences:
        raise SynthesisError("the text has nothing to speak (only punctuation or symbols)", field="text")
    if mode == "zero_shot":
        validate_markup(request.transcript, version)
        transcript = "".join(normalizer.normalize(request.transcript, split=False))
    instruct = request.instruct or ""
    texts = [build_llm_text(mode, version, sentence, transcript, instruct) for sentence in sentences]
    segments = [Segment(llm.text, sentence) for llm, sentence in zip(texts, sentences)]
    return RequestPlan(mode=mode, segments=segments, llm_prompt_text=texts[0].prompt_text, speed=request.speed)
