"""The Speak tab's fields as one request: the saved voice or the uploaded recording, checked with the voice
library's rule, then the request contract's own rules (``Request.build``) and the inline markup, so every
problem is said in the field it belongs to before anything is queued. Mixed into ``generation.Generation``
(which provides ``host``); ``problem_words`` gives a rule's problem in the page's words (the action bar's too).
"""

from __future__ import annotations

from dataclasses import replace

from cosyvoice_mac.engine import VoiceError
from cosyvoice_mac.engine.voice_library import judge_voice_audio
from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.frontend.inline import parse_inline
from cosyvoice_mac.request import MODES, Request, Voice
from cosyvoice_mac.webui.post_controls import post_settings
from cosyvoice_mac.webui.render import PROMPT_PROBLEM_KEYS
from cosyvoice_mac.webui.sampling_controls import sampling_settings
from cosyvoice_mac.webui.strings import text as say

POST_OFF = (False, False, None)  # the post-processing controls (trim, normalise, target) as they start: off


class PageRequest:
    """The Speak tab's request building (state lives on the ``Generation`` it is mixed into)."""

    def build_request(
        self,
        lang,
        audio,
        voice,
        transcript,
        text,
        mode,
        instruct,
        seed,
        speed,
        stream=False,
        post=POST_OFF,
        sampling=(),
        style=None,
        take_check=None,
    ):
        """(Request, None) or (None, (where, strings key, values)) for the first problem found. ``style``: the saved
        voice's recording to speak with (None or "": its own); ``take_check`` the take check's box (None: as the
        check setting says).

        The rules are the request's own (``Request.build``); this only adds the page's quick look at the
        prompt file and says where each problem shows. Streaming plays at speed 1.0 (the model cannot change
        the speed of audio it has already sent), so the slider is ignored then; the page says so.
        """
        mode = mode if mode in MODES else "zero_shot"
        if voice:
            engine = self.host.engine if self.host is not None else None
            if engine is None:
                return None, ("status", "status_no_model", {})
            try:
                chosen = replace(engine.voice(voice, style or None), transcript=transcript)
            except VoiceError as error:
                return None, ("prompt", "voice_error", {"message": str(error)})
        elif not audio:
            return None, ("prompt", "prompt_needed", {})
        else:
            try:
                check = judge_voice_audio(audio)  # the voice library's rule: a tone or music is no voice
            except VoiceError as error:  # the speech detector is not installed
                return None, ("prompt", "voice_error", {"message": str(error)})
            if not check.ok:
                return None, ("prompt", PROMPT_PROBLEM_KEYS[check.problem], check.details)
            chosen = Voice.recording(audio, transcript=transcript)
        try:
            request = Request.build(
                text,
                chosen,
                mode=mode,
                instruct=instruct,
                seed=seed,
                speed=1.0 if stream else speed,
                stream=bool(stream),
                post=post_settings(*post),
                sampling=sampling_settings(*sampling),
                check=None if take_check is None else bool(take_check),
            )
            # a malformed inline tag is said here, before the job waits in the queue
            parse_inline(request.text, voice_styles(self.host.engine if self.host is not None else None, voice))
        except RequestError as error:
            return None, _problem(error)
        return request, None


def voice_styles(engine, name: str | None) -> tuple[str, ...]:
    """The styles the saved voice ``name`` has recordings of, which its inline tags may name beside the model's
    own; none for no saved voice (or one gone since it was picked: the voice's own check says so)."""
    if engine is None or not name:
        return ()
    try:
        return engine.voices.style_names(name)
    except VoiceError:
        return ()


# Where each request rule's problem shows, and the page's own words for it where it has them.
FIELD_SLOTS = {"text": "text", "voice": "prompt", "transcript": "prompt", "mode": "mode", "instruct": "mode"}
PAGE_KEYS = {
    "text_empty": "text_empty",
    "text_too_long": "counter_over",
    "transcript_needed": "transcript_needed",
    "instruct_needed": "instruct_needed",
    "seed_invalid": "seed_invalid",
    "prompt_needed": "prompt_needed",
}


def _problem(error: RequestError) -> tuple[str, str, dict]:
    key = PAGE_KEYS.get(error.code)
    values = dict(error.values) if key else {"message": str(error)}
    return FIELD_SLOTS.get(error.field, "status"), key or "status_invalid", values


def problem_words(lang: str, error: RequestError) -> str:
    """A request rule's problem in the page's words."""
    _, key, values = _problem(error)
    return say(lang, key, **values)
