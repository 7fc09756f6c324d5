"""The bodies the long-form routes take (``longform_routes.py``): JSON models and the multipart sampling fields."""

from __future__ import annotations

from fastapi import Form
from pydantic import BaseModel, ConfigDict, Field

from cosyvoice_mac.api.errors import bad_request
from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.request import SAMPLING_FIELDS, Sampling
from cosyvoice_mac.settings import setting


class PostBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trim: bool = False
    loudness_lufs: float | None = None
    check: bool | None = None  # the take check for every line (None: as the server is set)


class SamplingBody(PostBody):
    """The sampling settings of every line of a long job (unset: the model's own); the rule is the contract's."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: float | None = None
    repetition_window: float | None = None

    def sampling(self) -> Sampling:
        """RequestError naming a field out of its range (the route's 400)."""
        return Sampling.build(**{name: getattr(self, name) for name in SAMPLING_FIELDS})


def sampling_form(
    temperature: float | None = Form(None),
    top_p: float | None = Form(None),
    top_k: float | None = Form(None),
    repetition_window: float | None = Form(None),
) -> Sampling:
    """The multipart routes' sampling fields, checked (a 400 naming the field) before the job starts."""
    given = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "repetition_window": repetition_window}
    try:
        return Sampling.build(**given)
    except RequestError as error:
        raise bad_request(str(error), error.code, error.field) from None


class DialogueBody(SamplingBody):
    script: str
    cast: dict[str, str] = Field(default_factory=dict, description="speaker tag -> saved voice name")
    pause_s: float = setting("pause").default
    per_line_files: bool = False
    seed: int | None = None
    retake_from: str | None = None  # an earlier dialogue's result (its name in ``files``): only its flagged lines anew


class GlossaryRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str
    replacement: str
    language: str = "all"


class GlossaryBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entries: list[GlossaryRow]
