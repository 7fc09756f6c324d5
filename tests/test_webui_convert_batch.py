"""The page's "Convert recordings" tab (``LongformCallbacks.convert_batch``) through a real engine running the
preview voice: several uploads converted with a progress bar per recording, a bad one in the middle named with
its reason while the rest are converted, the results offered as files; what is missing is said first."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.engine.host import HostConfig, ModelHost, Settings
from cosyvoice_mac.webui.callbacks import Callbacks

PROGRESS, MESSAGE, AUDIO, FILES = range(4)


@pytest.fixture(scope="module")
def callbacks(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui-convert-batch")
    (root / "models").mkdir()
    host = ModelHost(
        HostConfig(
            models_dir=root / "models",
            outputs_dir=root / "outputs",
            cache_dir=root / "cache",
            device="cpu",
            torch_threads=1,
            max_queue=4,
            preview=True,
        )
    )
    host.start()
    assert host.engine.start(wait=True, timeout=240), host.status()
    yield Callbacks(host, Settings(root / "cache"))
    host.close()


@pytest.fixture(scope="module")
def uploads(make_speech, tmp_path_factory):
    """As the page hands them over: first.wav (speech), second.wav (silence), third.wav (speech), photo.png."""
    folder = tmp_path_factory.mktemp("uploads")
    speech, rate = soundfile.read(make_speech("The birch canoe slid on the smooth planks."), dtype="float32")
    soundfile.write(folder / "first.wav", speech, rate)
    soundfile.write(folder / "second.wav", np.zeros(rate * 2, np.float32), rate)
    soundfile.write(folder / "third.wav", speech[: len(speech) // 2 + rate // 2], rate)
    (folder / "photo.png").write_bytes(b"\x89PNG\r\n")
    return [str(folder / name) for name in ("third.wav", "photo.png", "second.wav", "first.wav")]


def _request(session="convert-batch"):
    return SimpleNamespace(session_hash=session)


def test_the_tab_converts_each_upload_and_names_the_bad_one(callbacks, uploads):
    updates = list(callbacks.longform.convert_batch("en", uploads, "", "", 1.0, False, False, -16, _request()))
    bars = [u[PROGRESS] for u in updates if "<progress" in str(u[PROGRESS])]
    assert any('value="1" max="3"' in bar for bar in bars) and 'value="3" max="3"' in bars[-1]
    final = updates[-1][MESSAGE]
    assert "Converted 2, skipped 0 already converted, 1 could not be converted." in final
    assert "second.wav (second.wav is silent" in final and "Skipped, not audio files: photo.png." in final
    files = [Path(path) for path in updates[-1][FILES]]
    wavs = sorted(path.name for path in files if path.suffix == ".wav")
    assert wavs == ["first.wav", "third.wav"] and any(path.suffix == ".zip" for path in files)
    first = next(path for path in files if path.name == "first.wav")
    assert abs(soundfile.info(first).duration - soundfile.info(uploads[3]).duration) < 0.05
    sidecar = json.loads(first.with_suffix(".json").read_text())
    assert sidecar["mode"] == "voice_conversion" and sidecar["interface"] == "page"
    table, *_ = callbacks.history_show("en", "first.wav", 0)  # each recording's job is in the page's history
    assert [row[1] for row in table["data"]] == [f"🔁 converted from first.wav ({sidecar['source_duration_s']:.1f} s)"]


def test_what_is_missing_is_said_in_either_language(callbacks):
    def said(lang, sources):
        return list(callbacks.longform.convert_batch(lang, sources, "", "", 1, False, False, -16, _request()))[-1]

    assert "Choose the recordings" in said("en", [])[MESSAGE]
    assert "请先选择要转换的录音" in said("zh", None)[MESSAGE]
