"""The interface's two languages: the same keys, no English left in the Chinese page, every key used exists."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest

from cosyvoice_mac.frontend.special_tokens import INSTRUCTIONS
from cosyvoice_mac.webui import strings

WEBUI = Path(strings.__file__).parent
# Names and codes that stay as they are in Chinese text: product and format names, units, commands.
KEPT_IN_CHINESE = {
    "Esc",  # key names, as printed on the keys
    "Ctrl",
    "CosyVoice",
    "CosyVoice2",
    "CosyVoice3",
    "Mac",
    "WAV",
    "MP3",
    "FLAC",
    "M4A",
    "ffmpeg",
    "Linux",
    "GB",
    "Core",
    "ML",
    "PyTorch",
    "GPU",
    "CPU",
    "macOS",
    "MLX",
    "Apple",
    "Hugging",
    "Face",
    "ModelScope",
    "fp32",  # a number format, as the menu names it
    "models",  # the folders' own names
    "outputs",
    "OGG",
    "CSV",
    "LUFS",  # a unit
    "Piper",  # the preview voice's parts and their licences
    "TTS",
    "WORLD",
    "pyworld",
    "CC0",
    "MIT",
    "Ray",  # the cluster scheduler the app's jobs may run on (docs/cluster.md)
}  # product names stay as they are


def _placeholders(entry: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(entry) if name}


def test_both_tables_have_the_same_keys_and_placeholders():
    assert set(strings.EN) == set(strings.ZH)
    for key in strings.EN:
        assert _placeholders(strings.EN[key]) == _placeholders(strings.ZH[key]), key


def test_every_entry_formats_with_its_placeholders():
    for table in strings.TABLES.values():
        for key, entry in table.items():
            values = {name: 1 for name in _placeholders(entry)}
            assert entry.format(**values), key


def test_every_key_the_code_asks_for_exists():
    source = "\n".join(path.read_text(encoding="utf-8") for path in WEBUI.glob("*.py"))
    asked = set(re.findall(r"""say\((?:lang|DEFAULT_LANGUAGE|self\.lang|lang, )?[^"'()]*["']([a-z_]+)["']""", source))
    asked |= set(re.findall(r"""\{"(?:value|label|info|placeholder)": "([a-z_]+)"\}?""", source))
    # (not a subscript or a call's first argument: controls["voice_msg"] and sidecar.get("prompt_text") are no keys)
    asked |= set(
        re.findall(r"""(?<![\[(])["'](status_[a-z_]+|prompt_[a-z_]+|voice_[a-z_]+|restart_[a-z_]+)["']""", source)
    )
    missing = sorted(key for key in asked if key not in strings.EN)
    assert not missing, missing
    assert len(asked) > 40  # the patterns above really found the keys


def test_every_trained_instruction_has_a_chinese_menu_label():
    assert {preset.label for preset in INSTRUCTIONS} == set(strings.PRESET_LABELS_ZH)


@pytest.mark.parametrize("lang", [None, "fr", "<script>"])
def test_an_unknown_language_falls_back_to_english(lang):
    assert strings.text(lang, "generate") == "Generate"
    assert strings.preset_label(lang, "Sichuan dialect") == "Sichuan dialect"
    assert strings.preset_label("zh", "Sichuan dialect") == "四川话"


# Code spans that stay as code in Chinese text: a command, a variable, a file, markup or a placeholder (each holds
# one of these characters); a plain word in backticks is no code, and shows as backticks where no Markdown renders.
CODE_MARKS = set(" =/.[{<-_:(\\")  # an inline (style) tag or an escape is markup too
ASCII_WORD = re.compile(r"(?<![\w/.-])[A-Za-z][A-Za-z0-9]*(?![\w/.-])")
# What Chinese text keeps as it is: code spans, HTML tags, markup ([S1], [breath], an inline (happy) tag), link
# targets, and a value the user types, quoted (“en”, “text, voice”).
NOT_PROSE = re.compile(r"`[^`]*`|<[^>]*>|\[[^\]]*\]|\]\([^)]*\)|\([a-z][a-z0-9-]*\)|“[\x20-\x7e]*”")


def _plain_text_keys() -> set[str]:
    """The entries Gradio shows as plain text (labels, hints, placeholders), where backticks show as themselves."""
    source = "\n".join(path.read_text(encoding="utf-8") for path in WEBUI.glob("*.py"))
    return set(re.findall(r"""["'](?:label|info|placeholder)["']: ["']([a-z_]+)["']""", source))


def _rendered(entry: str) -> str:
    """The entry as the page shows it, each placeholder filled with a Chinese word or a number."""
    values = {}
    for _, name, spec, _ in string.Formatter().parse(entry):
        if name:
            values[name] = 1 if spec and spec[-1] in "dfgs%" and spec[-1] != "s" else "值"
    return entry.format(**values)


def test_every_entry_renders_in_chinese_without_english_words_or_stray_backticks():
    """Issue 50 item 6: every entry of every table, rendered, in Chinese: no ASCII-only word outside the short
    allow-list (outside real code: commands, variables, files, markup); no backticks around a plain word, and
    none at all in labels and hints (Gradio shows those as plain text, backticks and all)."""
    problems, plain_text = {}, _plain_text_keys()
    assert {"history_label", "lf_loudness_label", "seed_info"} <= plain_text  # the reader finds them
    for lang, table in strings.TABLES.items():
        for key, entry in table.items():
            spans = re.findall(r"`([^`]*)`", entry)
            if spans and key in plain_text:
                problems[(lang, key)] = f"backticks in plain text: {spans}"
            elif plain := [span for span in spans if not CODE_MARKS & set(span)]:
                problems[(lang, key)] = f"a plain word in backticks: {plain}"
            if lang == "zh":
                prose = NOT_PROSE.sub(" ", _rendered(entry))
                words = sorted(set(ASCII_WORD.findall(prose)) - KEPT_IN_CHINESE)
                if words:
                    problems[(lang, key)] = f"English left: {words}"
    assert not problems, "\n".join(f"{where}: {what}" for where, what in sorted(problems.items()))
    assert all(re.search(r"[\u4e00-\u9fff]", label) for label in strings.PRESET_LABELS_ZH.values())


def test_the_tables_column_names_follow_the_language_and_keep_the_rows():
    import pandas as pd

    from cosyvoice_mac.webui.longform_layout import GLOSSARY_COLUMNS, _relabelled

    rows = [["CosyVoice", "Cosy Voice", "all"]]
    shown = _relabelled(GLOSSARY_COLUMNS)("zh", pd.DataFrame(rows, columns=["key", "replacement", "language"]))
    assert list(shown.columns) == ["词或短语", "替换为", "语言"] and shown.values.tolist() == rows
    assert list(_relabelled(GLOSSARY_COLUMNS)("en", rows).columns) == ["word or phrase", "replacement", "language"]
