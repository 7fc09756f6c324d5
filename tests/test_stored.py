"""Every file the app wrote earlier reads through one typed reader (``cosyvoice_mac.stored``): a bad record is
left out or repaired with a note, never a section taken down. Each kind of file is read here through the
function its page section or API route uses: the history (sidecars and ``webui.json``), the voice list (page
and ``/v1/voices``), the glossary (its editor and every job) and a batch's resume."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import numpy as np
import soundfile

from cosyvoice_mac.api.voice_door import VoiceDoor
from cosyvoice_mac.engine.host import Settings, starting_engine
from cosyvoice_mac.engine.voice_library import VoiceLibrary
from cosyvoice_mac.frontend.glossary import GlossaryStore, RequestGlossary
from cosyvoice_mac.longform.batch import BatchFolder, BatchItem
from cosyvoice_mac.stored import Field, typed, typed_list
from cosyvoice_mac.webui.history import HistoryBook, history_view
from cosyvoice_mac.webui.voice_cards import render_card, render_voice_list
from tests.fakes.fake_pipeline import fake_request

AUDIO = np.zeros(2400, dtype=np.float32)
GOOD_HASH = "a" * 64


def test_a_record_keeps_what_fits_reads_a_wrong_field_as_its_default_and_skips_one_without_its_key(caplog):
    shape = {"name": Field(("text",), required=True), "count": Field(("whole",), default=0)}
    with caplog.at_level(logging.WARNING, logger="cosyvoice_mac.stored"):
        record, notes = typed({"name": "a", "count": "three", "extra": [1]}, shape, "the test file")
    assert record == {"name": "a", "count": 0, "extra": [1]}  # an unknown key is kept as written
    assert notes == ["the test file: 'count' holds 'three', not a whole; read as 0"] and notes[0] in caplog.text
    assert typed({"count": 1}, shape, "x")[0] is None and typed([1], shape, "x")[0] is None
    assert typed({"name": "a", "count": True}, shape, "x")[0]["count"] == 0  # a flag is not a number
    kept, notes = typed_list([{"name": "a"}, {"name": 5}, "junk", {"name": "b", "count": 2}], shape, "the list")
    assert [record["name"] for record in kept] == ["a", "b"] and len(notes) == 2


def _result(outputs, name: str, **facts) -> None:
    soundfile.write(outputs / f"{name}.wav", AUDIO, 24000)
    (outputs / f"{name}.json").write_text(json.dumps({"file": f"{name}.wav", "text": name, **facts}))


def test_a_wrong_typed_page_setting_leaves_the_history_and_the_engine_menu_standing(tmp_path):
    outputs, cache = tmp_path / "outputs", tmp_path / "cache"
    outputs.mkdir()
    cache.mkdir()
    _result(outputs, "kept", seed=3)
    _result(outputs, "odd", seed="abc", speed=[2], duration_s={"s": 1}, created=5)
    (cache / "webui.json").write_text(json.dumps({"history_cleared_at": "yesterday", "engine": 5, "theirs": "x"}))
    settings = Settings(cache)
    book = HistoryBook(outputs, settings)
    view = history_view("en", book.entries())  # what the History section shows on every page load
    assert sorted(row[-1] for row in view.table["data"]) == ["kept.wav", "odd.wav"]
    assert "Error" not in json.dumps(view.table) and view.page_words
    assert starting_engine(None, settings) == "auto"
    book.clear()  # a Clear later replaces the bad value and keeps what it does not know
    assert book.entries() == [] and json.loads((cache / "webui.json").read_text())["theirs"] == "x"


def _voice(name: str, **fields) -> dict:
    return {"name": name, "audio_hash": GOOD_HASH, "model_id": "m", "transcript": None, "created": 1.0, **fields}


def test_one_bad_saved_voice_is_left_out_of_the_list_the_rest_shows_and_nothing_is_lost(tmp_path):
    library = VoiceLibrary(tmp_path)
    library.folder.mkdir(parents=True)
    voices = {
        "Good": _voice("Good", transcript="Hello there."),
        "Late": _voice("Late", created="yesterday", transcript=7),  # repaired: read as unset
        "Far": _voice("Far", created=1e300),  # no time a clock can show
        "Escapes": _voice("Escapes", audio_file="../../secret.wav"),
        "No hash": _voice("No hash", audio_hash=5),  # unusable: left out, kept in the file
        "Junk": "not a voice",
    }
    library.index_path.write_text(json.dumps({"format": 1, "voices": voices}))
    names = [entry["name"] for entry in library.list()]
    assert names == ["Escapes", "Far", "Good", "Late"]
    assert render_voice_list("en", library.list()).count("\n| ") == 4  # the page's table
    assert "Late" in render_card("en", library.get("Late")) and "Far" in render_card("en", library.get("Far"))
    assert "audio_path" not in library.get("Escapes")  # never a path outside the voices folder
    door = SimpleNamespace(host=SimpleNamespace(engine=SimpleNamespace(voices=library)), uses_preview=False)
    listed = VoiceDoor.voices(door)  # GET /v1/voices
    assert [entry["name"] for entry in listed] == names and {entry["created_at"] for entry in listed} == {0, 1}
    problem = library.problem()
    assert "2 saved voice(s)" in problem and "'No hash'" in problem and "'Junk'" in problem
    assert not list(library.folder.glob("voices.json.unreadable-*"))  # the list is not set aside for one voice

    library.rename("Good", "Better")
    stored = json.loads(library.index_path.read_text())["voices"]
    assert stored["No hash"] == voices["No hash"] and stored["Junk"] == "not a voice"  # written back as they were
    assert "Better" in stored and "Good" not in stored


def _glossary(tmp_path, rows) -> GlossaryStore:
    store = GlossaryStore(tmp_path / "glossary.json")
    store.path.write_text(json.dumps({"entries": rows}, ensure_ascii=False))
    return store


def test_one_bad_glossary_entry_is_left_out_and_every_other_still_applies(tmp_path):
    store = _glossary(
        tmp_path,
        [
            {"key": "CosyVoice", "replacement": "cosy voice"},
            {"key": 5, "replacement": "five"},
            {"key": "SQL", "replacement": ""},
            {"key": "GIF", "replacement": "jif", "language": ["en"]},  # repaired: every language
            "junk",
            {"key": "cosyvoice", "replacement": "again"},  # a repeat of the first
        ],
    )
    assert [entry.key for entry in store.entries()] == ["CosyVoice", "GIF"]  # what the page's editor shows
    spoken, applied, note = RequestGlossary(store).apply(fake_request("CosyVoice makes a GIF."))  # every job
    assert spoken.text == "cosy voice makes a jif." and note is None and len(applied) == 2
    problem = store.problem()
    assert problem and "left out" in problem and not store.damaged()
    assert store.start_empty() is None and len(store.entries()) == 2  # no reason to empty a glossary that reads
    store.replace(store.entries())  # saving keeps the file as it was beside it
    (aside,) = store.kept_copies()
    assert '"key": 5' in aside.read_text() and store.problem() is None


def test_a_damaged_batch_manifest_only_makes_its_files_again(tmp_path):
    folder = BatchFolder(tmp_path / "batch")
    folder.folder.mkdir()
    item = BatchItem(1, "One.", "one.wav")
    (folder.folder / "one.wav").write_bytes(b"RIFF")
    for manifest in ('{"files": ["one.wav"]}', "[1, 2]", '{"files": {"one.wav": 5, "../x.wav": "k"}}', "{"):
        folder.manifest_path.write_text(manifest)
        assert folder.done() == {} and not folder.is_done(item, "k")
    folder.manifest_path.write_text(json.dumps({"files": {"one.wav": "k", "gone.wav": 3}}))
    assert folder.is_done(item, "k")
    folder.record(BatchItem(2, "Two.", "two.wav"), "j")  # resumes with the good entry kept
    assert json.loads(folder.manifest_path.read_text())["files"] == {"one.wav": "k", "two.wav": "j"}


def test_the_probe_s_timings_and_the_core_ml_manifest_read_what_they_can(tmp_path):
    from cosyvoice_mac.coreml.convert import read_manifest
    from cosyvoice_mac.pipeline.probe import read_cache

    timings = {"llm": {"float32": 0.5}}
    cache = tmp_path / "probe.json"
    cache.write_text(json.dumps({"good": {"timings": timings}, "bad": 5, "worse": {"timings": "fast"}}))
    assert read_cache(cache) == {"good": {"timings": timings}}  # the others are probed again
    cache.write_text("[1]")
    assert read_cache(cache) == {}
    options = SimpleNamespace(tag="v1-fp16-all")
    (tmp_path / "hift_coreml-v1-fp16-all.json").write_text("[1]")
    assert read_manifest(tmp_path, options) is None  # converted again, never an AttributeError later
