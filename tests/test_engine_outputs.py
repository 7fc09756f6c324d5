"""Saved results: names, atomic writes, the JSON sidecar, the WAV INFO chunk, and clear errors."""

from __future__ import annotations

import errno
import json
import os
import re
import time

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.engine.outputs import OutputWriteError, write_output
from cosyvoice_mac.sound.wav import read_wav_info

FACTS = {
    "text": "Hello there, 你好.",
    "mode": "zero_shot",
    "instruct": None,
    "seed": 7,
    "speed": 1.0,
    "model": "tiny-model",
    "device": "cpu",
    "prompt_hash": "ab" * 32,
    "timings": {"llm": 0.5, "total": 1.0},
}
NOW = time.mktime((2025, 3, 4, 5, 6, 7, 0, 0, -1))


def _tone(seconds=0.25, rate=24000):
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def test_result_is_named_by_time_and_short_id_with_sidecar_and_info(tmp_path):
    audio = _tone()
    files = write_output(tmp_path, "0123456789abcdef", audio, 24000, FACTS, now=NOW)

    assert files.wav_path.name == "20250304-050607-01234567.wav"
    assert files.sidecar_path == files.wav_path.with_suffix(".json")
    sidecar = json.loads(files.sidecar_path.read_text(encoding="utf-8"))
    for key, value in FACTS.items():
        assert sidecar[key] == value
    assert sidecar["file"] == files.wav_path.name and sidecar["sample_rate"] == 24000
    assert sidecar["duration_s"] == pytest.approx(0.25)

    read_back, rate = soundfile.read(files.wav_path, dtype="float32")
    assert rate == 24000 and np.abs(read_back - audio).max() < 1e-4

    info = read_wav_info(files.wav_path)
    assert info["INAM"] == FACTS["text"]
    assert "tiny-model" in info["ISFT"]
    assert json.loads(info["ICMT"]) == sidecar
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([files.wav_path.name, files.sidecar_path.name])


def test_two_jobs_in_the_same_second_do_not_collide(tmp_path):
    first = write_output(tmp_path, "aaaaaaaa1111", _tone(), 24000, FACTS, now=NOW)
    second = write_output(tmp_path, "aaaaaaaa2222", _tone(0.5), 24000, FACTS, now=NOW)  # same short id
    third = write_output(tmp_path, "bbbbbbbb", _tone(), 24000, FACTS, now=NOW)
    names = {first.wav_path.name, second.wav_path.name, third.wav_path.name}
    assert len(names) == 3
    assert second.wav_path.name == "20250304-050607-aaaaaaaa-2.wav"
    assert soundfile.info(second.wav_path).duration == pytest.approx(0.5)
    assert soundfile.info(first.wav_path).duration == pytest.approx(0.25)
    assert all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{8}(-\d+)?\.wav", name) for name in names)


def test_disk_full_gives_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)  # where the one atomic write flushes
    with pytest.raises(OutputWriteError) as caught:
        write_output(tmp_path, "cafe0000", _tone(), 24000, FACTS, now=NOW)
    message = str(caught.value)
    assert "disk is full" in message and f"in {tmp_path.name}/" in message and "still available" in message
    assert str(tmp_path.parent) not in message  # said to clients of a server: never where its files live
    assert caught.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


def test_read_only_folder_gives_a_clear_error(tmp_path, monkeypatch):
    real_open = os.open

    def read_only(path, flags, mode=0o777, **kwargs):
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system")
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(OutputWriteError, match="read-only") as caught:
        write_output(tmp_path, "cafe0000", _tone(), 24000, FACTS, now=NOW)
    assert "disk space" not in str(caught.value) and "writable disk" in str(caught.value)  # advice that fits


def test_a_file_in_place_of_the_folder_is_explained(tmp_path):
    blocker = tmp_path / "outputs"
    blocker.write_text("not a folder")
    with pytest.raises(OutputWriteError, match="could not save the result"):
        write_output(blocker / "inner", "cafe0000", _tone(), 24000, FACTS)
