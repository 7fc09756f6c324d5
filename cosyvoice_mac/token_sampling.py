"""How the speech model draws its tokens, as a request asks (temperature, top-p, top-k, the repetition
guard's window): ``Request.sampling``. Its own module so the contract (``request.py``) stays one idea a file;
its ranges are the settings table's rows. Torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass

from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.settings import setting
from cosyvoice_mac.settings.fields import SAMPLING_FIELDS


@dataclass(frozen=True)
class Sampling:
    """How the speech model draws its tokens; None for a field: the model's own (its YAML's ``llm.sampling``).
    ``repetition_window`` is the repetition guard's window (upstream ``win_size``). The ranges are the settings
    table's; the preview voice draws no tokens and records them only. Checked when built, like ``Request``."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    repetition_window: int | None = None

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def build(cls, **given) -> "Sampling":
        """From what a door received: a whole float (the page's number box) becomes an int for a whole-number
        field; None stays the model's own. RequestError names the first bad field."""
        return cls(**{name: _whole(value) if setting(name).type is int else value for name, value in given.items()})

    def validate(self) -> None:
        """Raise RequestError naming the field; the only place these rules are written."""
        for name in SAMPLING_FIELDS:
            value, row = getattr(self, name), setting(name)
            if value is None:
                continue
            number = (int,) if row.type is int else (int, float)
            if isinstance(value, bool) or not isinstance(value, number) or not row.low <= value <= row.high:
                kind = "a whole number" if row.type is int else "a number"
                raise RequestError(
                    name,
                    "sampling_invalid",
                    f"{name} {value!r} must be {kind} from {row.low:g} to {row.high:g} "
                    "(leave it out for the model's own)",
                    low=row.low,
                    high=row.high,
                )

    def given(self) -> dict:
        """The fields set (not the model's own), for the samplers' overrides."""
        return {name: getattr(self, name) for name in SAMPLING_FIELDS if getattr(self, name) is not None}

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in SAMPLING_FIELDS}


def _whole(value):
    """A whole float (a number box's 25.0) as int; anything else as given, for validate() to judge."""
    return int(value) if isinstance(value, float) and math.isfinite(value) and value.is_integer() else value
