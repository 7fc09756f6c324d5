"""The JSON sidecar beside every saved WAV (also stored in the WAV's INFO chunk): its shape, written and read
here only.

A sidecar holds the header written here (``file``, ``created``, ``sample_rate``, ``duration_s``) and the facts
its writer recorded: a job's (its request's ``facts()``, the engine's, ``outputs.write_output``) or a long
job's (``longform.files.ResultFiles``). ``Sidecar`` is the record: the fields a reader relies on, typed, and
every key as written in ``recorded`` (what is saved, unknown keys included).

Reading (``Sidecar.read``, the page's history) takes any sidecar ever written: a missing key reads as its
default, an unknown one is kept in ``recorded``, and a value of the wrong type reads as missing, never as an
error (the lenient readings of ``stored``, the one reader of files the app wrote). Torch-free, like the page
that reads it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cosyvoice_mac.conversion_request import VOICE_CONVERSION
from cosyvoice_mac.request import MODES
from cosyvoice_mac.stored import KINDS, as_number, as_text, as_whole, read_json

SOFTWARE = "cosyvoice-mac"
TITLE_CHARS = 200  # of the text, as the WAV's title (INAM)
KNOWN_MODES = (*MODES, VOICE_CONVERSION)


@dataclass(frozen=True)
class Sidecar:
    """One result's facts. ``mode`` is a known mode or None (an older or a long job's sidecar); ``source`` and
    ``source_duration_s`` are a voice conversion's recording; ``version`` the model's version (or the preview's)."""

    file: str  # the WAV's name, in the sidecar's folder
    sample_rate: int | None = None
    duration_s: float = 0.0
    created: str | None = None  # local time, "YYYY-mm-ddTHH:MM:SS"
    text: str = ""
    mode: str | None = None
    voice: str | None = None  # a saved voice's name; None for a recording
    instruct: str | None = None
    prompt_text: str | None = None
    seed: int = 0
    speed: float = 1.0
    model: str | None = None
    version: str | None = None
    source: str | None = None
    source_duration_s: float | None = None
    recorded: dict = field(default_factory=dict, compare=False)  # every key as written

    @classmethod
    def new(cls, wav_name: str, samples: int, sample_rate: int, facts: Mapping, now: float | None = None) -> "Sidecar":
        """The sidecar of a WAV called ``wav_name`` holding ``samples`` samples at ``sample_rate``, made ``now``
        (default: this moment), recording ``facts`` (plain JSON values) after the header."""
        created = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() if now is None else now))
        header = {"file": wav_name, "created": created, "sample_rate": sample_rate}
        header["duration_s"] = round(samples / sample_rate, 3)
        return cls._parsed(wav_name, {**facts, **header})

    @classmethod
    def read(cls, data: object) -> "Sidecar | None":
        """The record of a parsed sidecar (any JSON value); None when it is not one of ours (not an object, or
        no WAV named by a bare ``*.wav`` file name)."""
        if not isinstance(data, Mapping):
            return None
        name = data.get("file")
        if not isinstance(name, str) or Path(name).name != name or not name.endswith(".wav"):
            return None
        return cls._parsed(name, data)

    @classmethod
    def _parsed(cls, name: str, data: Mapping) -> "Sidecar":
        mode, model, version = data.get("mode"), data.get("model"), data.get("version")
        return cls(
            file=name,
            sample_rate=_rate(data.get("sample_rate")),
            duration_s=as_number(data.get("duration_s"), 0.0),
            created=as_text(data.get("created")),
            text=str(data.get("text") or ""),
            mode=mode if isinstance(mode, str) and mode in KNOWN_MODES else None,
            voice=as_text(data.get("voice")),
            instruct=as_text(data.get("instruct")),
            prompt_text=as_text(data.get("prompt_text")),
            seed=as_whole(data.get("seed")),
            speed=as_number(data.get("speed"), 1.0),
            model=str(model) if model else None,
            version=version if isinstance(version, str) else None,
            source=str(data.get("source")) if data.get("source") else None,
            source_duration_s=_seconds(data.get("source_duration_s")),
            recorded=dict(data),
        )

    @property
    def is_conversion(self) -> bool:
        return self.mode == VOICE_CONVERSION

    def json_bytes(self) -> bytes:
        """The sidecar file's content: UTF-8 JSON, keys sorted, indented for a reader."""
        return json.dumps(self.recorded, ensure_ascii=False, indent=2, sort_keys=True).encode("utf-8")

    def wav_info(self) -> dict[str, str]:
        """The WAV's LIST/INFO chunk: title (the text), software (and model), date, and the sidecar as JSON."""
        return {
            "INAM": self.text[:TITLE_CHARS],
            "ISFT": f"{SOFTWARE} ({self.model or 'unknown model'})",
            "ICRD": self.created or "",
            "ICMT": json.dumps(self.recorded, ensure_ascii=False, sort_keys=True),
        }


def read_sidecar(path: str | Path) -> Sidecar | None:
    """The record in the sidecar file ``path``; None when it cannot be read, is not JSON or is not ours."""
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    return Sidecar.read(data)


def _rate(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _seconds(value) -> float | None:
    return float(value) if KINDS["number"](value) else None
