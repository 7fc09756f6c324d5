"""The output sidecar, one record (``engine.sidecar.Sidecar``) written by every writer (a job's result, a long
job's files) and read by the page's history, which takes any sidecar ever written."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.engine.host import Settings
from cosyvoice_mac.engine.outputs import write_output
from cosyvoice_mac.engine.sidecar import Sidecar, read_sidecar
from cosyvoice_mac.longform.files import ResultFiles
from cosyvoice_mac.sound.wav import read_wav_info
from cosyvoice_mac.webui.history import HistoryBook

PACKAGE = Path(__file__).resolve().parents[1] / "cosyvoice_mac"
FACTS = {
    "text": "Hello there.",
    "mode": "zero_shot",
    "instruct": None,
    "prompt_text": "what the prompt says",
    "voice": "Ada",
    "seed": 7,
    "speed": 1.25,
    "model": "tiny-model",
    "version": "cosyvoice3",
    "timings": {"total": 1.0},
}
AUDIO = np.zeros(12000, np.float32)


def _both_writers(tmp_path) -> list[Path]:
    """The sidecar each writer makes of the same audio and facts."""
    job = write_output(tmp_path / "outputs", "job-1", AUDIO, 24000, FACTS).sidecar_path
    long_job = ResultFiles().wav(tmp_path / "long" / "a.wav", AUDIO, 24000, FACTS)[1]
    return [job, long_job]


def test_every_writer_writes_the_same_record_and_the_reader_reads_it_back_typed(tmp_path):
    paths = _both_writers(tmp_path)
    for path in paths:
        record = read_sidecar(path)
        assert record is not None and record.file == path.with_suffix(".wav").name
        assert (record.text, record.mode, record.voice, record.prompt_text) == (
            "Hello there.",
            "zero_shot",
            "Ada",
            "what the prompt says",
        )
        assert (record.seed, record.speed, record.sample_rate, record.duration_s) == (7, 1.25, 24000, 0.5)
        assert record.model == "tiny-model" and record.version == "cosyvoice3" and record.created
        assert record.recorded["timings"] == {"total": 1.0}  # what the reader does not type is kept as written
        assert json.loads(read_wav_info(path.with_suffix(".wav"))["ICMT"]) == json.loads(path.read_text("utf-8"))
    job, long_job = (json.loads(path.read_text(encoding="utf-8")) for path in paths)
    assert set(job) == set(long_job)  # one header, whichever door wrote it
    infos = [read_wav_info(path.with_suffix(".wav")) for path in paths]
    assert infos[0].keys() == infos[1].keys() == {"INAM", "ISFT", "ICRD", "ICMT"}


def test_the_sidecar_shape_is_written_in_one_module():
    writers = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value == "ICMT":
                writers.add(path.relative_to(PACKAGE).as_posix())
    assert writers == {"engine/sidecar.py"}


@pytest.mark.parametrize(
    "data",
    [
        [],
        "x.wav",
        {},
        {"file": None},
        {"file": "../elsewhere.wav"},
        {"file": "sub/x.wav"},
        {"file": "x.mp3"},
    ],
)
def test_what_is_not_one_of_ours_is_not_read(data):
    assert Sidecar.read(data) is None


def test_an_old_sidecar_reads_with_defaults_and_keeps_what_it_holds():
    old = Sidecar.read({"file": "x.wav", "written_by": "an older version", "mode": "karaoke"})
    assert (old.text, old.mode, old.voice, old.seed, old.speed, old.duration_s) == ("", None, None, 0, 1.0, 0.0)
    assert old.model is None and old.source is None and old.recorded["written_by"] == "an older version"
    digits = Sidecar.read({"file": "x.wav", "seed": "12", "speed": "1.5", "duration_s": 3})
    assert (digits.seed, digits.speed, digits.duration_s) == (12, 1.5, 3.0)  # as the history always read them


def test_a_wrong_typed_field_reads_as_missing_and_the_history_still_lists_the_result(tmp_path):
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    soundfile.write(outputs / "odd.wav", AUDIO, 24000)
    odd = {"file": "odd.wav", "seed": "abc", "speed": [2], "duration_s": {"s": 1}, "voice": 5, "instruct": 3}
    (outputs / "odd.json").write_text(json.dumps({**odd, "source_duration_s": True, "text": "Still here."}))
    record = read_sidecar(outputs / "odd.json")
    assert (record.seed, record.speed, record.duration_s, record.voice, record.instruct) == (0, 1.0, 0.0, None, None)
    (entry,) = HistoryBook(outputs, Settings(tmp_path / "cache")).entries()
    assert entry.text == "Still here." and entry.mode == "zero_shot" and entry.seed == 0


def test_a_long_job_named_in_upper_case_is_saved_all_the_same(tmp_path):
    written = ResultFiles().wav(tmp_path / "LINE.WAV", AUDIO, 24000, {"text": "x"})
    assert json.loads(written[1].read_text(encoding="utf-8"))["file"] == "LINE.WAV"
