"""The rules a synthesis (``Request``) and a voice conversion (``ConversionRequest``) share, written once in
``request.SpeechRequest``, and the zero-shot/instruct rule written once for the door and the hand-built request."""

from __future__ import annotations

import ast
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest

from cosyvoice_mac import request as request_module
from cosyvoice_mac.conversion_request import VOICE_CONVERSION, ConversionRequest, Recording
from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.request import PostSettings, Request, SpeechRequest, Voice

SOURCE = Recording(samples=np.full(16000, 0.1, np.float32), sample_rate=16000)


def _refusal(build) -> tuple[str, str, str]:
    with pytest.raises(RequestError) as raised:
        build()
    return raised.value.field, raised.value.code, str(raised.value)


def _synthesis(**shared) -> Request:
    return Request(text="Hello.", mode="cross_lingual", **{"voice": Voice.saved_voice("Ada"), **shared})


def _conversion(**shared) -> ConversionRequest:
    return ConversionRequest(source=SOURCE, **{"voice": Voice.saved_voice("Ada"), **shared})


@pytest.mark.parametrize(
    "shared, field",
    [
        ({"voice": "Ada"}, "voice"),  # a name where a Voice belongs
        ({"voice": Voice()}, "voice"),
        ({"voice": Voice(saved="Ada", audio="/no/such.wav")}, "voice"),
        ({"speed": 2.5}, "speed"),
        ({"speed": True}, "speed"),
        ({"speed": 1.5, "stream": True}, "speed"),
        ({"post": {"trim": True}}, "post"),
    ],
)
def test_a_synthesis_and_a_conversion_refuse_a_shared_field_in_the_same_words(shared, field):
    said = _refusal(lambda: _synthesis(**shared))
    assert said[0] == field
    assert _refusal(lambda: _conversion(**shared)) == said


def test_both_kinds_are_speech_requests_and_record_the_shared_fields_alike():
    post = PostSettings(trim=True)
    synthesis, conversion = _synthesis(speed=1.5, post=post), _conversion(speed=1.5, post=post)
    shared = {field.name for field in fields(SpeechRequest)}
    assert shared == {"voice", "speed", "stream", "post"}
    for made in (synthesis, conversion):
        assert isinstance(made, SpeechRequest) and made.post is post
        assert {key: made.facts()[key] for key in ("voice", "speed", "stream")} == {
            "voice": "Ada",
            "speed": 1.5,
            "stream": False,
        }
    assert conversion.mode == VOICE_CONVERSION and conversion.text == "" and conversion.transcript is None
    assert conversion.seed == 0
    # What a conversion answers for a synthesis' fields is decided by what it is, never set from outside.
    with pytest.raises(TypeError):
        ConversionRequest(source=SOURCE, voice=Voice.saved_voice("Ada"), mode="zero_shot")
    assert replace(conversion, speed=1.0).mode == VOICE_CONVERSION


@pytest.mark.parametrize(
    "mode, transcript, instruct, field, code",
    [
        ("zero_shot", None, None, "transcript", "transcript_needed"),
        ("zero_shot", "   ", None, "transcript", "transcript_needed"),
        ("instruct", None, "", "mode", "instruct_needed"),
        ("instruct", None, "  ", "mode", "instruct_needed"),
    ],
)
def test_the_door_and_a_hand_built_request_refuse_a_mode_without_its_text_alike(
    mode, transcript, instruct, field, code
):
    voice = Voice.saved_voice("Ada", transcript=transcript)
    at_the_door = _refusal(lambda: Request.build("Hello.", voice, mode=mode, instruct=instruct, seed=0))
    by_hand = _refusal(lambda: Request(text="Hello.", voice=voice, mode=mode, instruct=instruct))
    assert at_the_door == by_hand
    assert at_the_door[:2] == (field, code)


def test_the_mode_rules_are_written_once():
    tree = ast.parse(Path(request_module.__file__).read_text(encoding="utf-8"))
    codes = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)]
    assert codes.count("transcript_needed") == 1 and codes.count("instruct_needed") == 1
