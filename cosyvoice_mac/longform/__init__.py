"""Long work built from ordinary requests: dialogue scripts, subtitle dubbing, batches and post-processing.
Each job checks its whole input first, then runs its lines one by one through a ``Speak`` (the page, the API
and the CLI all pass ``speakers.EngineSpeak``: an engine's queue). The pronunciation glossary, applied to every
request, is ``frontend/glossary.py``."""

from __future__ import annotations

from cosyvoice_mac.errors import InputError


class LongformError(InputError):
    """Input to a long job that cannot be used; the message names the line, row or cue."""
