"""One app server for the whole reliability suite (starting one costs ~10 s): the preview voice, a queue
bound of MAX_QUEUE, a short hang timeout and temp-folder age, a voice library that was damaged before the
start, and an outputs folder that can be made full."""

from __future__ import annotations

import json

import pytest

from tests.reliability.server import AppServer, FullDisk

KEPT_VOICE = "Kept voice"


@pytest.fixture(scope="session")
def full_disk(tmp_path_factory):
    root = tmp_path_factory.mktemp("app")
    disk = FullDisk.prepare(root / "outputs", root / "disk-is-full")
    yield disk
    disk.release()


@pytest.fixture(scope="session")
def app(full_disk):
    root = full_disk.folder.parent
    voices = root / "cache" / "voices"
    voices.mkdir(parents=True)
    good = {
        "format": 1,
        "voices": {
            KEPT_VOICE: {
                "name": KEPT_VOICE,
                "audio_hash": "d" * 64,
                "model_id": "m",
                "transcript": None,
                "created": 0.0,
                "audio_file": None,
            }
        },
    }
    (voices / "voices.json.bak").write_text(json.dumps(good))
    (voices / "voices.json").write_bytes(b'{"format": 1, "voices": {"half-writ')  # damaged before the start
    server = AppServer(root).start(full_disk)
    yield server
    code = server.stop()
    assert code == 0, server.log()[-3000:]


@pytest.fixture(scope="session")
def client(app):
    return app.client()


@pytest.fixture(scope="session")
def speech(make_speech):
    return str(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))
