"""An app started over damaged files of its own, from outside: the voice list AND its backup unreadable, and an
unreadable pronunciation glossary. Each is said at start-up and on the page, nothing unreadable is deleted,
work goes on without it (long form included, with a note), and the page and the CLI (through the app) mend it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from gradio_client import handle_file

from tests.reliability.server import JOB_S, POST_OFF, REPO_ROOT, AppServer

DAMAGED_INDEX = b'{"format": 1, "voices": {"Ada": {"name": "Ada", "audio_h'
DAMAGED_BACKUP = b"\x00\x00\x00 torn by a crash"
DAMAGED_GLOSSARY = b'{"entries": [{"key": "GIF", "replacement": "jif"'


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    root = tmp_path_factory.mktemp("damaged-app")
    voices = root / "cache" / "voices"
    voices.mkdir(parents=True)
    (voices / "voices.json").write_bytes(DAMAGED_INDEX)
    (voices / "voices.json.bak").write_bytes(DAMAGED_BACKUP)
    (root / "cache" / "glossary.json").write_bytes(DAMAGED_GLOSSARY)
    server = AppServer(root).start()
    yield server
    assert server.stop() == 0, server.log()[-3000:]


def _sse(answer: httpx.Response) -> list[dict]:
    return [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]


def test_both_voice_list_copies_unreadable_are_said_as_such_and_both_are_kept(damaged):
    log = damaged.log()
    assert "voices.json" in log and "its backup voices.json.bak could not be read" in log, log[-3000:]
    assert "restored" not in log
    folder = damaged.cache / "voices"
    (index,) = folder.glob("voices.json.unreadable-*")
    (backup,) = folder.glob("voices.json.bak.unreadable-*")
    assert index.read_bytes() == DAMAGED_INDEX and backup.read_bytes() == DAMAGED_BACKUP
    panel = damaged.status(damaged.client())
    assert "Saved voices" in panel and index.name in panel and backup.name in panel and "restored" not in panel


def test_an_unreadable_glossary_is_said_at_start_and_long_form_goes_on_without_it(damaged, tmp_path):
    assert "glossary.json cannot be read" in damaged.log(), damaged.log()[-3000:]
    answer = httpx.post(
        damaged.url + "v1/longform/batch",
        files={"file": ("lines.txt", b"One line, spoken without the glossary.\n", "text/plain")},
        data={"name": "without-glossary"},
        timeout=2 * JOB_S,
    )
    assert answer.status_code == 200, answer.text[-2000:]
    events = _sse(answer)
    assert events[0]["type"] == "note" and "glossary" in events[0]["message"], events
    assert events[-1]["type"] == "done" and events[-1]["done"] == 1, events
    lines = tmp_path / "lines.txt"
    lines.write_text("A line from the page.\n")
    client = damaged.client()
    page = damaged.call(client, "/batch", "en", handle_file(str(lines)), None, "page-without-glossary", *POST_OFF)
    assert "Done: 1 of 1" in page[1] and "glossary file cannot be read" in page[1], page[1]
    listed = httpx.get(damaged.url + "v1/glossary", timeout=JOB_S)
    assert listed.status_code == 500 and "start an empty glossary" in listed.json()["error"]["message"]


def test_the_page_offers_an_empty_glossary_and_keeps_the_damaged_file(damaged):
    """(gradio_client leaves the button's update out of an answer: the browser test of the panel sees it.)"""
    client = damaged.client()
    note = damaged.call(client, "/glossary_state", "en")
    assert "glossary.json" in note and "cannot be read" in note and "Start an empty glossary" in note, note
    rows, message, note_after = damaged.call(client, "/start_empty_glossary", "en")
    (kept,) = damaged.cache.glob("glossary.json.unreadable-*")
    assert kept.read_bytes() == DAMAGED_GLOSSARY and kept.name in message, message
    assert note_after == ""
    assert json.loads((damaged.cache / "glossary.json").read_text()) == {"entries": []}


def _cli(arguments: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "OMP_WAIT_POLICY": "PASSIVE",
        "PYTHONPATH": str(REPO_ROOT),
        "COSYVOICE_CACHE_DIR": str(cwd / "this-machine's-cache"),  # not the app's: only --server reaches it
    }
    return subprocess.run(
        [sys.executable, "-m", "cosyvoice_mac", *arguments],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_S,
        check=False,
    )


def test_the_glossary_command_works_through_the_running_app(damaged, tmp_path):
    csv = tmp_path / "fixes.csv"
    csv.write_text("key,replacement,language\nGIF,jif,en\nSQL,sequel,all\n")
    imported = _cli(["glossary", "import", str(csv), "--server", damaged.url], tmp_path)
    assert imported.returncode == 0 and "imported 2 entries" in imported.stdout, imported.stderr[-2000:]
    data = httpx.get(damaged.url + "v1/glossary", timeout=JOB_S).json()["data"]
    assert [(row["key"], row["replacement"]) for row in data] == [("GIF", "jif"), ("SQL", "sequel")]
    listed = _cli(["glossary", "list", "--server", damaged.url], tmp_path)
    assert listed.returncode == 0 and "en\tGIF\tjif" in listed.stdout and "all\tSQL\tsequel" in listed.stdout
    exported = _cli(["glossary", "export", str(tmp_path / "out.csv"), "--server", damaged.url], tmp_path)
    assert exported.returncode == 0 and "GIF,jif,en" in (tmp_path / "out.csv").read_text()
    assert not (tmp_path / "this-machine's-cache" / "glossary.json").exists()  # the app's glossary, not this one
    refused = _cli(["glossary", "import", str(tmp_path / "missing.csv"), "--server", damaged.url], tmp_path)
    assert refused.returncode == 2 and "does not exist" in refused.stderr and "Traceback" not in refused.stderr
