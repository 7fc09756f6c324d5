"""The Speak workspace's take check on the page: the last result's check and captions, another kept take put in
it, and Retake (Generate with the check's next seed). Mixed into ``callbacks.Callbacks``, whose ``generate`` a
Retake runs."""

from __future__ import annotations

import gradio as gr

from cosyvoice_mac.pipeline.takes.retake import next_seed
from cosyvoice_mac.webui.state import Session
from cosyvoice_mac.webui.takes_view import put_take_in, retake_offered, takes_shown


class TakeCallbacks:
    """The take panel's answers; ``generate`` is the class it is mixed into's."""

    @staticmethod
    def last_takes(lang: str, session: Session):
        """The last result's ``TakesPanel`` values (check, captions, their files, the takes to pick), then the
        Retake button's."""
        wav = session.last_output if isinstance(session, Session) else None
        return (*takes_shown(lang, wav), retake_offered(wav))

    @staticmethod
    def use_last_take(lang: str, session: Session, choice: str | None):
        """The picked take put in the last result: (its player, its ``TakesPanel`` values, the Retake button)."""
        wav = session.last_output if isinstance(session, Session) else None
        played, panel = put_take_in(lang, wav, choice)
        return (played or gr.skip(), *panel, retake_offered(wav))

    @staticmethod
    def retake_seed(seed) -> int:
        """The seed a Retake uses: the next one the take check would use."""
        return next_seed(int(seed or 0))

    def retake(self, lang, audio, voice, transcript, text, mode, instruct, seed, speed, stream, session,
               request: gr.Request, *controls):  # fmt: skip
        """Retake (offered when a sentence stayed flagged): Generate with the same inputs and the next seed, kept
        (shown in the seed field, as "Keep this seed" would keep it). One event the person starts, so it stays
        on the queue as Generate does. ``controls``: Generate's last inputs, "Keep this seed" last."""
        again = self.retake_seed(seed)
        updates = self.generate(
            lang, audio, voice, transcript, text, mode, instruct, again, speed, stream, session, request,
            *controls[:-1], True,
        )  # fmt: skip
        for index, update in enumerate(updates):
            yield update._replace(seed=again) if index == 0 else update
