"""The interface's two languages: the same keys, no English left in the Chinese table, every key used exists."""

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
    "models",  # the folder's own name
}  # product names stay as they are


def _placeholders(entry: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(entry) if name}


def test_both_tables_have_the_same_keys_and_placeholders():
    assert set(strings.EN) == set(strings.ZH)
    for key in strings.EN:
        assert _placeholders(strings.EN[key]) == _placeholders(strings.ZH[key]), key


def test_no_english_is_left_in_the_chinese_table():
    leftovers = {}
    for key, entry in strings.ZH.items():
        prose = re.sub(r"`[^`]*`|\{[^}]*\}|\[[^\]]*\]|<[^>]*>", " ", entry)  # code, placeholders, markup
        words = {word for word in re.findall(r"[A-Za-z][A-Za-z0-9]+", prose) if word not in KEPT_IN_CHINESE}
        if words:
            leftovers[key] = sorted(words)
    assert not leftovers, leftovers
    assert all(re.search(r"[\u4e00-\u9fff]", label) for label in strings.PRESET_LABELS_ZH.values())


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
