"""The long-form commands end to end on the preview voice (no CosyVoice weights are needed): every line is a
job of the app's engine, started by the command, and recorded ``interface: cli`` in outputs/."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import soundfile

from cosyvoice_mac.cli.main import main
from cosyvoice_mac.webui.features import preview_available

pytestmark = pytest.mark.skipif(not preview_available(), reason="the preview voice's packages are not installed")


@pytest.fixture(scope="module")
def home(tmp_path_factory, make_speech):
    """A cache folder with two saved voices, made through the CLI."""
    folder = tmp_path_factory.mktemp("longform-cli")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COSYVOICE_CACHE_DIR", str(folder / "cache"))
        for name, sentence in (
            ("Anna", "The quick brown fox jumps over the lazy dog."),
            ("Bob", "A journey of a thousand miles begins with one step."),
        ):
            assert (
                main(
                    [
                        "voices",
                        "add",
                        name,
                        "--audio",
                        str(make_speech(sentence, seconds=5.0)),
                        "--transcript",
                        sentence,
                    ]
                )
                == 0
            )
    return folder


@pytest.fixture
def cli(home, monkeypatch, capsys):
    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(home / "cache"))
    monkeypatch.chdir(home)

    def run(*args):
        spoken = args[0] in ("dialogue", "dub", "batch")
        local = ["--local", "--models-dir", str(home / "no-models"), "--outputs-dir", str(home / "outputs")]
        extra = local if spoken else []
        code = main([*args, *extra])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_dialogue_and_a_resumed_batch_from_the_command_line(cli, home):
    (home / "talk.txt").write_text("Anna: Hello Bob.\n[S2] {cheerfully} Hi Anna, how are you?\nAnna: Fine.\n")
    code, out, err = cli("dialogue", "talk.txt", "--cast", "S2=Bob", "--pause", "0.3", "--out", "talk", "--seed", "1")
    assert code == 0 and "3/3 lines done" in out, err
    timing = json.loads((home / "talk.timing.json").read_text())["lines"]
    audio, rate = soundfile.read(home / "talk.wav")
    assert [t["voice"] for t in timing] == ["Anna", "Bob", "Anna"]
    assert timing[-1]["end"] == pytest.approx(len(audio) / rate, abs=0.01)
    sidecars = [json.loads(path.read_text()) for path in sorted((home / "outputs").glob("*.json"))]
    assert len(sidecars) == 3 and {sidecar["interface"] for sidecar in sidecars} == {"cli"}
    (home / "lines.txt").write_text("One line.\nAnother line.\n")
    assert cli("batch", "lines.txt", "--voice", "Anna", "--out-dir", "out", "--trim")[0] == 0
    code, out, _ = cli("batch", "lines.txt", "--voice", "Anna", "--out-dir", "out", "--trim")
    assert "2/2 lines done" in out and sorted(p.name for p in (home / "out").glob("*.wav")) == ["0001.wav", "0002.wav"]


def test_a_folder_of_recordings_is_converted_into_a_saved_voice_from_the_command_line(cli, home, make_speech):
    recordings = home / "recordings"
    recordings.mkdir()
    speech, rate = soundfile.read(make_speech("Glue the sheet to the dark blue background."), dtype="float32")
    for name in ("one.wav", "two.wav"):
        soundfile.write(recordings / name, speech, rate)
    (recordings / "notes.txt").write_text("not audio")
    code, out, err = cli("batch", "recordings", "--voice", "Anna", "--out-dir", "converted")
    assert code == 0 and "2/2 files done" in out, (out, err)
    assert "skipped notes.txt" in err
    assert sorted(p.name for p in (home / "converted").glob("*.wav")) == ["one.wav", "two.wav"]
    sidecar = json.loads((home / "converted" / "one.json").read_text())
    assert sidecar["mode"] == "voice_conversion" and sidecar["voice"] == "Anna"


@pytest.mark.parametrize(
    "args, files, message",
    [
        (("dialogue", "bad.txt", "--out", "x"), {"bad.txt": "Anna: hi\nno tag\n"}, "error: line 2 has no speaker tag"),
        (("dialogue", "bad.txt", "--out", "x"), {"bad.txt": "Zed: hi\n"}, "error: line 1: speaker 'Zed' has no voice"),
        (
            ("dub", "bad.srt", "--voice", "Anna", "--out", "x"),
            {"bad.srt": "1\n00:00:02,000 --> 00:00:01,000\nA\n"},
            "error: cue 1: it ends",
        ),
        (
            ("dub", "ok.srt", "--voice", "Anna", "--out", "x", "--speed-limit", "3"),
            {"ok.srt": "1\n00:00:01,000 --> 00:00:02,000\nA\n"},
            "error: the speed-up limit must be 1-2",
        ),
        (("batch", "bad.csv", "--out-dir", "o"), {"bad.csv": "text,file\nhi,../up\n"}, "error: line 2: the file name"),
        (("batch", "bad.pdf", "--out-dir", "o"), {"bad.pdf": "x"}, "error: a batch is a .txt or .csv file"),
        (("glossary", "import", "g.csv"), {"g.csv": "key,replacement\nword,[zz][qq]\n"}, "error: row 1 ('word')"),
        (("dub", "missing.srt", "--voice", "Anna", "--out", "x"), {}, "error: missing.srt does not exist"),
        (("voices", "add", "Carl", "--audio", "notes.txt"), {"notes.txt": "not audio"}, "error: "),
    ],
)
def test_bad_long_form_input_is_one_line_and_writes_nothing(cli, home, args, files, message):
    for name, text in files.items():
        (home / name).write_text(text)
    before = sorted(p.name for p in home.rglob("*"))
    code, _, err = cli(*args)
    assert code == 2 and message in err and "Traceback" not in err
    assert sorted(p.name for p in home.rglob("*")) == before


def test_the_glossary_round_trips_through_the_command_line(cli, home):
    (home / "g.csv").write_text("key,replacement,language\nminute,[M][AY0][N][UW1][T],en\n")
    assert cli("glossary", "import", "g.csv")[0] == 0
    assert "minute" in cli("glossary", "list")[1]
    assert cli("glossary", "export", "out.csv")[0] == 0
    assert (home / "out.csv").read_text() == (home / "g.csv").read_text()


def interrupt_when(process: subprocess.Popen, ready, timeout: float = 120) -> tuple[str, str]:
    """Ctrl-C (SIGINT) to ``process`` once ``ready()`` holds, while it still runs; its (stdout, stderr)."""
    try:
        deadline = time.monotonic() + timeout
        while not ready() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGINT)
        return process.communicate(timeout=60)
    finally:
        process.kill()


def test_ctrl_c_cancels_the_line_in_flight_and_keeps_the_finished_ones(home, tmp_path):
    """A real Ctrl-C (SIGINT) once the first line is saved: the command ends with 130, the dialogue holds
    exactly the lines whose jobs finished, labelled partial, and no line is saved after it."""
    sentence = "Anna: This is a long line of the dialogue, spoken slowly, so that it is still running when stopped."
    script = tmp_path / "long.txt"
    script.write_text("\n".join([sentence] * 12) + "\n")
    outputs = tmp_path / "outputs"
    env = {**os.environ, "COSYVOICE_CACHE_DIR": str(home / "cache"), "OMP_WAIT_POLICY": "PASSIVE"}
    command = [sys.executable, "-m", "cosyvoice_mac", "dialogue", str(script), "--out", str(tmp_path / "talk")]
    command += ["--local", "--models-dir", str(tmp_path / "no-models"), "--outputs-dir", str(outputs)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, err = interrupt_when(process, lambda: list(outputs.glob("*.json")))
    assert process.returncode == 130 and "(stopped: partial)" in out and "Traceback" not in err, err
    timing = json.loads((tmp_path / "talk.timing.json").read_text())
    saved = list(outputs.glob("*.json"))
    assert timing["partial"] and 1 <= len(timing["lines"]) < 12
    assert len(saved) == len(timing["lines"])
