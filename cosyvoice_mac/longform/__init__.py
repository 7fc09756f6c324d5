"""Long work built from ordinary requests: dialogue scripts, subtitle dubbing, batches and post-processing.
Each job checks its whole input first, then runs its lines one by one through a ``Speak`` (the page, the API
and the CLI all pass ``speakers.EngineSpeak``: an engine's queue). The pronunciation glossary, applied to every
request, is ``frontend/glossary.py``."""

from __future__ import annotations

from collections.abc import Iterable

from cosyvoice_mac.errors import InputError, RequestError
from cosyvoice_mac.frontend.inline import parse_inline


class LongformError(InputError):
    """Input to a long job that cannot be used; the message names the line, row or cue."""


def check_inline_markup(
    text: str, where: str, error: type[LongformError], voice_styles: Iterable[str] | None = None
) -> None:
    """Refuse a line whose inline markup (``[pause 500ms]``, ``[speed 1.2]``, ``(happy)``) is malformed, with
    ``where`` (e.g. "line 3") before the tag's own message, so a long job fails before any line is spoken.
    ``voice_styles``: the styles the line's voice has recordings of; None while the voice is not known (a
    script's or a file's own check: any well-formed style name passes, for the runner to check each line
    against its voice's styles before the first line is spoken)."""
    try:
        parse_inline(text, voice_styles)
    except RequestError as problem:
        raise error(f"{where}: {problem}", field=problem.field) from None
