"""One user-facing setting as plain data: what it is called at each door, its default, its allowed values and
its help in English and Chinese. Torch-free; the table's rows (``server.py``, ``fields.py``, ``tools.py``,
``advanced.py``) are made of these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The doors a setting can be offered at. A CLI command's door is "cli:<command>" (see CLI below).
PAGE = "page"  # a control on the web page
V1 = "/v1"  # a field of the /v1 API's requests
GRADIO = "gradio"  # a parameter of the Gradio API's /synthesize
PYTHON = "python"  # an argument of load_model / synthesize (cosyvoice_mac.load)
ENV = "env"  # only an environment variable (advanced: tuning and diagnostics)


def cli(*commands: str) -> tuple[str, ...]:
    """The CLI doors of ``commands``: ``cli("synth", "convert")`` -> ("cli:synth", "cli:convert")."""
    return tuple(f"cli:{command}" for command in commands)


LONG_COMMANDS = ("dialogue", "dub", "batch")  # the long-form commands share one argument group
MODEL_COMMANDS = ("serve", "synth", "convert", *LONG_COMMANDS)  # the commands that may build the model here


@dataclass(frozen=True)
class Setting:
    """One setting, declared once. ``range`` is inclusive (low, high; a high of ``math.inf``: no upper bound);
    ``page_range`` narrows what the page's slider offers where the rule allows more than a slider can show well.
    ``env_fills_flag``: the flag's default is the variable's value when it is set (flag > variable > default,
    read when the parser is built). ``default_words`` says the default in words where it is a rule, not a value."""

    name: str
    help: str
    help_zh: str
    default: Any = None
    type: type = str
    choices: tuple = ()
    range: tuple[float, float] | None = None
    step: float | None = None
    page_range: tuple[float, float] | None = None
    page_default: Any = None  # where the page's control starts, when that differs from the default (off)
    flag: str | None = None
    env: str | None = None
    env_fills_flag: bool = False
    doors: tuple[str, ...] = ()
    group: str = "server"
    metavar: str | None = None
    default_words: str | None = None
    repeat: bool = False  # the flag may be given several times; the variable is a comma-separated list

    def __post_init__(self) -> None:
        if self.default is not None and self.choices and self.default not in self.choices:
            raise ValueError(f"setting {self.name}: default {self.default!r} is not one of {self.choices}")
        if self.range is not None and self.default is not None and not self.range[0] <= self.default <= self.range[1]:
            raise ValueError(f"setting {self.name}: default {self.default!r} is outside {self.range}")

    @property
    def commands(self) -> tuple[str, ...]:
        """The CLI commands that offer this setting's flag."""
        return tuple(door.removeprefix("cli:") for door in self.doors if door.startswith("cli:"))

    @property
    def low(self) -> float:
        assert self.range is not None, self.name
        return self.range[0]

    @property
    def high(self) -> float:
        assert self.range is not None, self.name
        return self.range[1]
