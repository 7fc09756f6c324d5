"""The package's front door: the README's Python example runs as printed, and load_model picks like the app."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.onnx_models import make_tiny_model_dir

REPO = Path(__file__).resolve().parents[1]


def _readme_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)
    assert blocks, "the README shows no Python example"
    return blocks[0]


def test_the_readme_python_example_runs_as_printed(tmp_path, make_speech):
    code = _readme_example()
    assert len([line for line in code.splitlines() if line.strip()]) <= 5
    make_tiny_model_dir("cosyvoice3", tmp_path / "models" / "Fun-CosyVoice3-0.5B")
    shutil.copy(make_speech("what I say in me dot wav", seconds=3.0), tmp_path / "me.wav")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_WAIT_POLICY": "PASSIVE",
        "COSYVOICE_MODELS_DIR": str(tmp_path / "models"),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    text, seconds, seed = done.stdout.split()[-3:]
    assert float(seconds) > 0 and seed == "1" and "Python" in done.stdout


def test_load_model_names_a_folder_a_name_under_models_or_the_preview(tmp_path):
    from cosyvoice_mac.load import NoModelError, resolve_model

    models = tmp_path / "models"
    (models / "CosyVoice2-0.5B").mkdir(parents=True)
    (models / "CosyVoice2-0.5B" / "cosyvoice2.yaml").write_text("sample_rate: 24000\n")
    assert resolve_model(None, models) == models / "CosyVoice2-0.5B"  # no v3: any model
    (models / "Fun-CosyVoice3-0.5B").mkdir()
    (models / "Fun-CosyVoice3-0.5B" / "cosyvoice3.yaml").write_text("sample_rate: 24000\n")
    assert resolve_model(None, models) == models / "Fun-CosyVoice3-0.5B"  # v3 first, as the page
    assert resolve_model("CosyVoice2-0.5B", models) == models / "CosyVoice2-0.5B"
    assert resolve_model("preview", models) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    from cosyvoice_mac.webui.features import preview_available

    if preview_available():
        assert resolve_model(None, empty) is None  # the preview voice
    else:
        with pytest.raises(NoModelError, match="download"):
            resolve_model(None, empty)


def test_the_front_door_names_stay_light():
    code = (
        "import sys, cosyvoice_mac as c; c.Request, c.Voice, c.CosyVoiceError, c.load_model; "
        "print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.stdout.strip() == "False", done.stderr


def test_the_cli_picks_the_model_like_the_app_without_model(tmp_path, make_speech):
    make_tiny_model_dir("cosyvoice2", tmp_path / "models" / "CosyVoice2-0.5B")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_WAIT_POLICY": "PASSIVE",
        "COSYVOICE_MODELS_DIR": str(tmp_path / "models"),
    }
    out = tmp_path / "out.wav"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cosyvoice_mac",
            "synth",
            "--prompt-wav",
            str(make_speech("Hello there, this is a test.")),
            "--text",
            "Hello.",
            "--device",
            "cpu",
            "--out",
            str(out),
            "--local",  # the app's engine here, whatever app this machine may be running
            "--outputs-dir",
            str(tmp_path / "outputs"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "loaded cosyvoice2" in done.stderr.lower() and out.is_file()


@pytest.mark.parametrize(
    ("argument", "variable", "expected"), [(None, "cpu", "cpu"), ("cpu", "mps", "cpu"), (None, "", "auto")]
)
def test_load_model_takes_the_device_in_the_settings_order(monkeypatch, argument, variable, expected):
    """The Python door follows the table's order as the CLI's --device does: argument, $COSYVOICE_DEVICE, auto."""
    from cosyvoice_mac import load as load_module
    from cosyvoice_mac.preview.backend import PreviewVoice

    asked = []

    def loaded(cls, path, device, dtype):
        asked.append(device)
        return PreviewVoice()  # building it loads nothing (its voices load on first use)

    monkeypatch.setattr(PreviewVoice, "from_pretrained", classmethod(loaded))
    monkeypatch.setenv("COSYVOICE_DEVICE", variable)
    load_module.load_model("preview", device=argument)
    assert asked == [expected]
