"""Every user-facing setting, declared once: its flag, environment variable, default, choices or range, help in
English and Chinese, and the doors that offer it (the page, the CLI's commands, ``/v1``, the Gradio API, Python).

The doors read this table and never restate a range or a list of choices: the CLI's arguments come from
:func:`add_argument`, the page's sliders from :func:`slider`, the request contract's ranges from :func:`bounds`
and :func:`choices`, and ``docs/configuration.md`` from ``python -m cosyvoice_mac.settings --markdown``.

One order decides a value (:func:`resolve`): the flag, else the environment variable, else the choice the page
saved, else the default. To add a setting, add a row to one of the row modules (``server``, ``fields``,
``tools``, ``credentials``, ``advanced``), read it through this module at each door, and regenerate the docs page.

Torch-free, on the bottom floor beside ``versions``: it imports only ``errors``, ``paths`` and ``versions``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from cosyvoice_mac.settings.advanced import ADVANCED_ROWS
from cosyvoice_mac.settings.credentials import CREDENTIAL_ROWS
from cosyvoice_mac.settings.fields import FIELD_ROWS, batch_name, batch_name_for
from cosyvoice_mac.settings.server import SERVER_ROWS
from cosyvoice_mac.settings.setting import ENV, GRADIO, PAGE, PYTHON, V1, Setting, cli
from cosyvoice_mac.settings.tools import TOOL_ROWS

__all__ = [
    "ENV",
    "GRADIO",
    "PAGE",
    "PYTHON",
    "SETTINGS",
    "V1",
    "Setting",
    "add_argument",
    "batch_name",
    "batch_name_for",
    "bounds",
    "choices",
    "cli",
    "env_flag",
    "env_value",
    "flag_default",
    "out_of_range",
    "resolve",
    "setting",
    "slider",
    "variables",
]

SETTINGS: dict[str, Setting] = {
    row.name: row for row in (*SERVER_ROWS, *FIELD_ROWS, *TOOL_ROWS, *CREDENTIAL_ROWS, *ADVANCED_ROWS)
}
_NO = ("0", "false", "no", "off", "")


def setting(name: str) -> Setting:
    """The row called ``name``; KeyError naming the known ones otherwise."""
    try:
        return SETTINGS[name]
    except KeyError:
        raise KeyError(f"no setting {name!r}; the table has {', '.join(SETTINGS)}") from None


def choices(name: str) -> tuple:
    return setting(name).choices


def bounds(name: str) -> tuple[float, float]:
    """The inclusive (low, high) a value of ``name`` must lie in."""
    found = setting(name).range
    if found is None:
        raise KeyError(f"setting {name!r} has no range")
    return found


def variables() -> dict[str, Setting]:
    """Every environment variable the package reads -> its setting."""
    return {row.env: row for row in SETTINGS.values() if row.env}


def env_value(name: str) -> str | None:
    """The setting's environment variable as set (surrounding spaces dropped), None when unset or empty."""
    variable = setting(name).env
    if variable is None:
        raise KeyError(f"setting {name!r} has no environment variable")
    value = os.environ.get(variable, "").strip()
    return value or None


def env_flag(name: str) -> bool | None:
    """A yes/no setting from its variable: unset gives the row's default (None: the caller's own rule
    decides); 0, false, no, off or empty mean no."""
    row = setting(name)
    if row.type is not bool or row.env is None:
        raise KeyError(f"setting {name!r} is not a yes/no environment variable")
    raw = os.environ.get(row.env)
    return row.default if raw is None else raw.strip().lower() not in _NO


def _typed(row: Setting, value: str) -> Any:
    if row.repeat:
        return [item.strip() for item in value.split(",") if item.strip()]
    if row.type is bool:
        return value.lower() not in _NO
    return row.type(value)


def resolve(name: str, flag: Any = None, saved: Any = None) -> Any:
    """The one resolution order: ``flag`` (what a flag or argument gave, None when not given), else the
    environment variable, else ``saved`` (the page's remembered choice, ignored unless it is still one of the
    choices), else the default."""
    row = setting(name)
    if flag is not None:
        return flag
    raw = os.environ.get(row.env, "").strip() if row.env else ""
    if raw:
        return _typed(row, raw)
    if saved is not None and (not row.choices or saved in row.choices):
        return saved
    return row.default


def add_argument(parser, name: str, **fixed):
    """Add the setting's flag to an argparse parser (or group) as the table declares it: choices, type,
    default (the variable's value first where ``env_fills_flag``), help with the default said. ``fixed``
    passes argparse options the table does not decide (``required``, ``dest``)."""
    row = setting(name)
    if row.flag is None:
        raise KeyError(f"setting {name!r} has no flag")
    options: dict[str, Any] = {"help": _flag_help(row), "default": flag_default(name)}
    if row.type is bool:
        options["action"] = "store_true"
    else:
        if row.repeat:
            options["action"] = "append"
        if row.type is not str:
            options["type"] = row.type
        if row.choices:
            options["choices"] = row.choices
        if row.metavar:
            options["metavar"] = row.metavar
    options.update(fixed)
    return parser.add_argument(row.flag, **options)


def flag_default(name: str) -> Any:
    """What a command sees when its flag is not given: the variable's value first where ``env_fills_flag``,
    None where the variable is read later (the value then says "not given"), else the default."""
    row = setting(name)
    if row.repeat:
        return list(resolve(name) or [])
    if row.type is bool:
        return bool(row.default)
    return resolve(name) if row.env_fills_flag else (None if row.env else row.default)


def _flag_help(row: Setting) -> str:
    said = row.default_words or (f"{row.default:g}" if isinstance(row.default, float) else row.default)
    where = f"${row.env}, else " if row.env and row.env_fills_flag else ""
    if row.range is not None and row.type is not int:
        words = span(row)
        return f"{row.help} ({words}; default {where}{said})" if said is not None else f"{row.help} ({words})"
    if said is None or said is False:
        return row.help
    return f"{row.help} (default {where}{said})".replace("%", "%%")


def out_of_range(name: str, value: Any) -> str | None:
    """Why ``value`` is outside the setting's range, in a sentence naming its flag; None when it fits (or is
    None: not given)."""
    row = setting(name)
    if value is None or row.range is None or row.low <= value <= row.high:
        return None
    return f"{row.flag or row.name} must be {span(row)} (got {value:g})"


def span(row: Setting) -> str:
    """The setting's range in words: "0.5 to 2" or "at least 1"."""
    low, high = (_number(bound) for bound in row.range)
    return f"at least {low}" if row.range[1] == math.inf else f"{low} to {high}"


def _number(bound: float) -> str:
    """A bound as a reader writes it: 2147483647, not 2.14748e+09; 0.5, not 0.500000."""
    return str(int(bound)) if bound != math.inf and float(bound).is_integer() else f"{bound:g}"


def slider(name: str) -> dict[str, Any]:
    """A page slider's minimum, maximum, step and starting value, as ``gr.Slider`` takes them."""
    row = setting(name)
    low, high = row.page_range or bounds(name)
    value = row.default if row.page_default is None else row.page_default
    return {"minimum": low, "maximum": high, "step": row.step, "value": value}


def as_path(value: Any) -> Path | None:
    return Path(value).expanduser() if value else None
