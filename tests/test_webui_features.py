"""Optional controls are offered only when what they need is really installed."""

from __future__ import annotations

import importlib

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
