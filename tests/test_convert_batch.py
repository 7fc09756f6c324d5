"""A batch of recordings to convert (``longform.convert_batch``), with a stand-in for the engine's conversion:
sorted sources, other files skipped with a note, a bad recording in the middle reported by name and reason while
the others go on, unique result names, resume, Stop. The doors (page, API, CLI) are tested with the preview
voice in ``tests/api/test_convert_batch_api.py`` and ``tests/test_webui_convert_batch.py``."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.engine.jobs import JobFailed
from cosyvoice_mac.engine.messages import Failed, Fault
from cosyvoice_mac.longform import LongformError
from cosyvoice_mac.longform.convert_batch import plan_sources, run_convert_batch, sources_in_folder
from cosyvoice_mac.longform.runner import Spoken


@pytest.fixture()
def folder(make_speech, tmp_path):
    """c.wav (speech), a.flac (speech), b.wav (silence), notes.txt, a sub-folder, a.mp3 (a second 'a')."""
    speech, rate = soundfile.read(make_speech("Glue the sheet to the dark blue background."), dtype="float32")
    sources = tmp_path / "sources"
    sources.mkdir()
    soundfile.write(sources / "c.wav", speech, rate)
    soundfile.write(sources / "a.flac", speech, rate)
    soundfile.write(sources / "b.wav", np.zeros(rate * 2, np.float32), rate)
    soundfile.write(sources / "a.mp3", speech, rate, format="MP3")
    (sources / "notes.txt").write_text("not audio")
    (sources / "inner").mkdir()
    return sources


class StandIn:
    """The engine's conversion, for the runner: the source's own samples back, one call per source; a source
    named in ``refuse`` fails as the worker's speech detector fails a recording of no speech."""

    def __init__(self, refuse=(), stop_after=None, stop=None):
        self.calls, self.refuse, self.stop_after, self.stop = [], set(refuse), stop_after, stop

    def __call__(self, line):
        self.calls.append(line.source.name)
        if self.stop_after is not None and len(self.calls) > self.stop_after:
            self.stop.set()
            raise JobFailed(Failed("job", "cancelled", fault=Fault.RESTARTED))
        if line.source.name in self.refuse:
            raise JobFailed(Failed("job", f"{line.source.name} holds no speech to convert", fault=Fault.INPUT))
        samples, rate = soundfile.read(line.source, dtype="float32")
        return Spoken(
            samples, rate, {"model": "stand-in", "source_hash": "h", "source_duration_s": len(samples) / rate}
        )


def test_the_sources_are_sorted_other_files_noted_and_results_never_share_a_name(folder):
    items, skipped = plan_sources(sources_in_folder(folder))
    assert [item.name for item in items] == ["a.flac", "a.mp3", "b.wav", "c.wav"]
    assert [item.file for item in items] == ["a-flac.wav", "a-mp3.wav", "b.wav", "c.wav"]
    assert skipped == ["inner", "notes.txt"]
    with pytest.raises(LongformError, match="no audio file to convert.*notes.txt"):
        plan_sources([folder / "notes.txt"])
    with pytest.raises(LongformError, match="is not a folder"):
        sources_in_folder(folder / "c.wav")


def test_a_bad_recording_in_the_middle_is_reported_and_the_others_are_converted(folder, tmp_path):
    items, skipped = plan_sources(sources_in_folder(folder))
    convert, progress = StandIn(refuse={"a.mp3"}), []
    out = tmp_path / "out"
    result = run_convert_batch(items, skipped, out, convert, voice="Anna", on_progress=progress.append)
    by_source = {entry["source"]: entry for entry in result.report}
    assert by_source["b.wav"]["status"] == "failed" and "b.wav is silent" in by_source["b.wav"]["reason"]
    assert by_source["a.mp3"]["status"] == "failed" and "holds no speech" in by_source["a.mp3"]["reason"]
    assert by_source["a.flac"]["status"] == by_source["c.wav"]["status"] == "made"
    assert by_source["notes.txt"]["status"] == "not_audio"
    assert convert.calls == ["a.flac", "a.mp3", "c.wav"]  # the silent one never reached the engine
    assert [p.done for p in progress] == [1, 2, 3, 4] and {p.total for p in progress} == {4}
    assert (result.done, result.total, result.stopped) == (4, 4, False)
    assert sorted(path.name for path in out.glob("*.wav")) == ["a-flac.wav", "c.wav"]
    sidecar = json.loads((out / "c.json").read_text())
    assert sidecar["mode"] == "voice_conversion" and sidecar["source"] == "c.wav" and sidecar["voice"] == "Anna"
    assert json.loads((out / "results.json").read_text())["results"] == result.report
    with zipfile.ZipFile(result.files[1]) as archive:
        assert sorted(name.split("/")[1] for name in archive.namelist()) == [
            "a-flac.json",
            "a-flac.wav",
            "c.json",
            "c.wav",
            "results.json",
        ]

    again = StandIn()  # a re-run: the made ones are skipped, the failed ones tried again
    rerun = run_convert_batch(items, skipped, out, again, voice="Anna")
    assert again.calls == ["a.mp3"]
    assert {e["source"]: e["status"] for e in rerun.report}["c.wav"] == "skipped"
    changed = StandIn()  # another speed is another result: every source is made again
    run_convert_batch(items, skipped, out, changed, voice="Anna", speed=1.5)
    assert changed.calls == ["a.flac", "a.mp3", "c.wav"]


def test_stop_ends_the_batch_between_recordings_and_keeps_what_was_made(folder, tmp_path):
    import threading

    items, skipped = plan_sources(sources_in_folder(folder))
    stop = threading.Event()
    convert = StandIn(stop_after=1, stop=stop)
    result = run_convert_batch(items, skipped, tmp_path / "out", convert, voice="Anna", should_stop=stop.is_set)
    assert result.stopped and result.done == 1
    assert [e["status"] for e in result.report if e["status"] != "not_audio"] == ["made"]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["partial"] is True


def test_a_failure_that_is_not_the_recordings_ends_the_batch(folder, tmp_path):
    items, skipped = plan_sources(sources_in_folder(folder))

    def engine_gone(line):
        raise JobFailed(Failed("job", "the model could not start", fault=Fault.UNAVAILABLE))

    with pytest.raises(JobFailed, match="could not start"):
        run_convert_batch(items, skipped, tmp_path / "out", engine_gone, voice="Anna")


def test_the_voice_is_made_ready_before_the_first_source_and_an_unusable_one_stops_the_batch(folder, tmp_path):
    from cosyvoice_mac.longform.speakers import VoiceUnusable

    items, skipped = plan_sources(sources_in_folder(folder))
    good = [item for item in items if item.name in ("a.flac", "c.wav")]
    events = []

    def convert(line):
        events.append(("convert", line.source.name))
        return StandIn()(line)

    def refuse(voices):
        events.append(("prepare", list(voices)))
        raise VoiceUnusable("the loaded model cannot use the saved voice 'Anna': its features are CosyVoice2's")

    out = tmp_path / "out"
    with pytest.raises(VoiceUnusable, match="'Anna'"):
        run_convert_batch(good, skipped, out, convert, voice="Anna", prepare=refuse)
    assert events == [("prepare", [("Anna", None)])] and not list(out.glob("*.wav"))  # stopped before any source

    events.clear()
    run_convert_batch(good, skipped, out, convert, voice="Anna", prepare=lambda v: events.append(("prepare", list(v))))
    assert events == [("prepare", [("Anna", None)]), ("convert", "a.flac"), ("convert", "c.wav")]
    events.clear()
    run_convert_batch(good, skipped, out, convert, voice="Anna", prepare=refuse)  # all made: nothing to prepare
    assert events == []
