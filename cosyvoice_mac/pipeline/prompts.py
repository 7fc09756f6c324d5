"""Turn a request (text, transcript, instruction, inline markup) into the LLM's inputs for each mode (spec 8.1).

Every mode feeds the flow the prompt's tokens and mel; they differ in what the LLM sees:
zero-shot: transcript + text, with the prompt's speech tokens; cross-lingual: the text only;
instruct: the instruction as the "prompt text", no prompt speech tokens.

Inline markup (``frontend/inline.py``) is read first: a ``[pause]`` becomes a silent segment and splits the text
there, a ``[speed]`` run keeps its own speed, and a ``(style)`` run is spoken in instruct mode with the style's
instruction (``versions.py`` says each version's wording) unless the voice has a recording of that style
(``style_voices``: the styles whose samples the caller passes the backend, each with its recording's transcript; a
run of one keeps the request's mode, reads that transcript as its prompt in zero-shot, and is spoken with that
sample).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cosyvoice_mac.frontend.inline import Pause, parse_inline
from cosyvoice_mac.frontend.markup import build_llm_text, validate_markup
from cosyvoice_mac.pipeline.types import SynthesisError
from cosyvoice_mac.request import SPEED_RANGE, Request
from cosyvoice_mac.versions import SPECS, spec_for


@dataclass(frozen=True)
class Segment:
    """One sentence group: what the LLM reads, in which mode, at which speed, and what a person would call its
    text. A pause is a segment of ``silence_s`` seconds with no text. ``style`` names the voice's sample of that
    style to speak with (None: the request's voice)."""

    llm_text: str
    display_text: str
    mode: str = "zero_shot"
    llm_prompt_text: str = ""
    speed: float = 1.0
    silence_s: float = 0.0
    style: str | None = None


@dataclass(frozen=True)
class RequestPlan:
    mode: str  # "zero_shot" | "cross_lingual" | "instruct"
    segments: list[Segment]
    llm_prompt_text: str  # the first spoken segment's
    speed: float


def plan_request(
    version: str, normalizer, request: Request, style_voices: Mapping[str, str | None] | None = None
) -> RequestPlan:
    """The segments of a (valid) request for model ``version``, with ``normalizer`` splitting the sentences.

    The request's own rules were checked when it was built; what is left is what only the text front end can
    tell: inline markup that is malformed, model markup this version does not know, or text that normalises to
    nothing. ``style_voices``: style -> the transcript of the voice's recording of it (None: it has none; see the
    module docstring).
    """
    style_voices = dict(style_voices or {})
    parts = parse_inline(request.text, style_voices)  # RequestError("text")
    transcript = _prompt_text(request.transcript, request.mode, version, normalizer)
    segments: list[Segment] = []
    low, high = SPEED_RANGE
    for part in parts:
        if isinstance(part, Pause):
            segments.append(Segment("", "", silence_s=part.seconds))
            continue
        validate_markup(part.text, version)  # before normalisation, which could rewrite an unknown unit
        speed = min(high, max(low, request.speed * part.speed))
        if request.stream and speed != 1.0:
            raise SynthesisError(
                f"[speed {part.speed:g}] cannot be used while streaming; turn streaming off or remove the tag",
                field="text",
            )
        mode, instruct, style, prompt = request.mode, request.instruct or "", None, transcript
        if part.style in style_voices:  # the recording's own words prompt its run (none: it speaks cross-lingual)
            style, prompt = part.style, _prompt_text(style_voices[part.style], request.mode, version, normalizer)
            mode = "cross_lingual" if mode == "zero_shot" and not prompt else mode
        elif part.style is not None:
            mode, instruct = "instruct", _style_instruction(version, part.style)
        for sentence in normalizer.normalize(part.text, split=True):
            llm = build_llm_text(mode, version, sentence, prompt, instruct)
            segments.append(Segment(llm.text, sentence, mode, llm.prompt_text, speed, style=style))
    spoken = [segment for segment in segments if not segment.silence_s]
    if not spoken:
        raise SynthesisError("the text has nothing to speak (only punctuation, symbols or pauses)", field="text")
    return RequestPlan(
        mode=request.mode, segments=segments, llm_prompt_text=spoken[0].llm_prompt_text, speed=request.speed
    )


def _prompt_text(transcript: str | None, mode: str, version: str, normalizer) -> str:
    """A recording's transcript as the LLM's prompt text in zero-shot mode (its markup checked); "" otherwise."""
    if mode != "zero_shot" or not transcript:
        return ""
    validate_markup(transcript, version)
    return "".join(normalizer.normalize(transcript, split=False))


def _style_instruction(version: str, style: str) -> str:
    """The instruction a style tag becomes for ``version`` (the preview voice plans as CosyVoice3)."""
    instruction = spec_for(version if version in SPECS else "cosyvoice3").style_instruction(style)
    if instruction is None:
        raise SynthesisError(
            f"({style}) needs a recording of that style in the voice; {version} has no instruction for it",
            field="text",
        )
    return instruction
