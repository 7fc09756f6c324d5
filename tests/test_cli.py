"""The command line, end to end on tiny model folders of both versions (``--local``: the app's engine in the
CLI's own process; ``tests/api/test_cli_through_app.py`` sends synth through a running app)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile

from tests.fakes.onnx_models import make_tiny_model_dir

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, outputs: Path) -> subprocess.CompletedProcess:
    """``synth --local`` saving in ``outputs``, whatever app this machine may be running."""
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(REPO)}
    args = (*args, "--local", "--outputs-dir", str(outputs))
    return subprocess.run(
        [sys.executable, "-m", "cosyvoice_mac", *args], capture_output=True, text=True, timeout=300, env=env, cwd=REPO
    )


@pytest.mark.parametrize("version", ["cosyvoice3", "cosyvoice2"])
@pytest.mark.parametrize(
    "mode", [[], ["--prompt-text", "Hello there, this is a test."], ["--instruct", "Speak slowly."]]
)
def test_synth_writes_a_24khz_wav(tmp_path, make_speech, version, mode):
    model = make_tiny_model_dir(version, tmp_path / version)
    out = tmp_path / "out.wav"
    done = _cli(
        "synth",
        "--model",
        str(model),
        "--prompt-wav",
        str(make_speech("Hello there, this is a test.")),
        "--text",
        "Hello world.",
        "--seed",
        "1",
        "--device",
        "cpu",
        "--out",
        str(out),
        *mode,
        outputs=tmp_path / "outputs",
    )
    assert done.returncode == 0, done.stderr
    samples, rate = soundfile.read(out)
    assert rate == 24000 and len(samples) > 0
    assert "wrote" in done.stdout
    [sidecar] = [json.loads(path.read_text()) for path in (tmp_path / "outputs").glob("*.json")]
    assert sidecar["interface"] == "cli" and sidecar["seed"] == 1 and sidecar["text"] == "Hello world."
    asked = {"--prompt-text": "zero_shot", "--instruct": "instruct"}
    assert sidecar["mode"] == (asked[mode[0]] if mode else "cross_lingual")


def test_bad_input_is_one_clear_line_not_a_traceback(tmp_path, make_speech):
    model = make_tiny_model_dir("cosyvoice3", tmp_path / "m")
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("this is not audio")
    done = _cli(
        "synth",
        "--model",
        str(model),
        "--prompt-wav",
        str(not_audio),
        "--text",
        "Hi.",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "o.wav"),
        outputs=tmp_path / "outputs",
    )
    assert done.returncode == 2
    assert "error: notes.wav is not an audio file" in done.stderr and "Traceback" not in done.stderr


def test_missing_model_folder_says_how_to_download(tmp_path, make_speech):
    done = _cli(
        "synth",
        "--model",
        str(tmp_path),
        "--prompt-wav",
        str(make_speech("Hello there, this is a test.")),  # a usable prompt: the model is what is missing
        "--text",
        "Hi.",
        "--out",
        str(tmp_path / "o.wav"),
        outputs=tmp_path / "outputs",
    )
    assert done.returncode == 2 and "bash run.sh download cosyvoice3" in done.stderr


def test_stream_and_coreml_flags_work_or_explain(tmp_path, make_speech):
    """--stream reports the first audio; --vocoder coreml off macOS says why and uses torch."""
    model = make_tiny_model_dir("cosyvoice3", tmp_path / "m")
    out = tmp_path / "s.wav"
    done = _cli(
        "synth",
        "--model",
        str(model),
        "--prompt-wav",
        str(make_speech("Hello there, this is a test.")),
        "--text",
        "The quick brown fox jumps over the lazy dog, twice over.",
        "--seed",
        "2",
        "--device",
        "cpu",
        "--stream",
        "--vocoder",
        "coreml",
        "--out",
        str(out),
        outputs=tmp_path / "outputs",
    )
    assert done.returncode == 0, done.stderr
    assert "first audio after" in done.stderr
    if sys.platform != "darwin":
        assert "vocoder: torch, because" in done.stderr
    assert soundfile.info(out).frames > 0
