"""Optional controls are offered only when what they need is really installed."""

from __future__ import annotations

import importlib

import pytest

from cosyvoice_mac.webui import features


def test_all_flags_are_reported():
    assert set(features.detect_features()) == set(features.FEATURES)


def test_asr_is_off_when_its_module_does_not_import(monkeypatch):
    real_import = importlib.import_module

    def refuse(name, *args):
        if name == "cosyvoice_mac.engine.asr":
            raise ImportError("no ASR here")
        return real_import(name, *args)

    monkeypatch.setattr(importlib, "import_module", refuse)
    assert features.asr_available() is False


def test_asr_is_off_without_a_model_on_disk(monkeypatch, tmp_path):
    asr = importlib.import_module("cosyvoice_mac.engine.asr")
    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(tmp_path))

    def no_model():
        raise asr.TranscriptionError("the bundled speech recogniser is not installed")

    monkeypatch.setattr(asr, "bundled_english_model", no_model)
    assert features.asr_available() is False


def test_asr_is_on_with_the_bundled_model(monkeypatch):
    asr = importlib.import_module("cosyvoice_mac.engine.asr")
    monkeypatch.setattr(features.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(asr, "bundled_english_model", lambda: asr.AsrModel(path=None, name="tiny", multilingual=False))
    assert features.asr_available() is True


@pytest.mark.parametrize(
    ("system", "machine", "menu_variable", "vocoder", "engine"),
    [
        ("linux", "x86_64", None, False, False),  # neither Core ML nor a fast MLX here
        ("linux", "x86_64", "1", False, True),  # MLX's CPU backend, asked for
        ("darwin", "x86_64", None, True, False),  # an Intel Mac: Core ML, no Metal MLX
        ("darwin", "arm64", None, True, True),
    ],
)
def test_the_engine_and_vocoder_menus_are_offered_only_where_they_apply(
    monkeypatch, system, machine, menu_variable, vocoder, engine
):
    monkeypatch.setattr(features.sys, "platform", system)
    monkeypatch.setattr(features.platform, "machine", lambda: machine)
    if menu_variable is None:
        monkeypatch.delenv(features.ENGINE_MENU_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(features.ENGINE_MENU_VARIABLE, menu_variable)
    flags = features.detect_features()
    assert (flags["vocoder_select"], flags["engine_select"]) == (vocoder, engine)


def test_the_advanced_fold_hides_for_the_preview_voice(tmp_path):
    from types import SimpleNamespace

    from cosyvoice_mac.webui.callbacks import Callbacks

    def callbacks_with(current):
        return SimpleNamespace(host=SimpleNamespace(current=current))

    preview, model = SimpleNamespace(is_preview=True), SimpleNamespace(is_preview=False)
    assert Callbacks.advanced_applies(callbacks_with(model), (True, False))
    assert not Callbacks.advanced_applies(callbacks_with(preview), (True, True))
    assert not Callbacks.advanced_applies(callbacks_with(model), (False, False))
