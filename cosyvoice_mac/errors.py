"""Our own errors. Every one carries a message written for the user (what went wrong, with which value,
and what to do), so the page, the CLI and the worker show ``str(error)`` as it is and classify errors by
type, never by reading their text. Anything that is not a CosyVoiceError is a bug or a device failure.

Torch-free: the page and the CLI import this before any model code.
"""

from __future__ import annotations


class CosyVoiceError(Exception):
    """Root of the errors this package raises on purpose; ``str()`` is safe to show a user."""


class InputError(CosyVoiceError, ValueError):
    """Bad input (text, prompt audio, a setting): the user can fix it and try again.

    ``field`` names the request's field at fault when it is known: the contract's names ("text", "voice",
    "transcript", "instruct", ...) and "prompt_audio" for the voice's recording; each door turns it into
    its own name for that field (the API's body field, the CLI's flag). None: not known.
    """

    field: str | None = None

    def __init__(self, *args, field: str | None = None):
        super().__init__(*args)
        if field is not None:
            self.field = field


class RequestError(InputError):
    """A request breaks one of its rules (``cosyvoice_mac.request``).

    ``field`` names the control it concerns ("text", "voice", "transcript", "mode", "instruct", "seed",
    "speed"); ``code`` is a stable name for the rule (the page turns it into its own language) and
    ``values`` fill that message (the count and the limit, ...).
    """

    def __init__(self, field: str, code: str, message: str, **values):
        super().__init__(message, field=field)
        self.code, self.values = code, values


class SynthesisError(InputError):
    """Bad input found while synthesising (unknown markup, a prompt too short, ...)."""
