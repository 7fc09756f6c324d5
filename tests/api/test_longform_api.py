"""Long-form work through the HTTP API (preview voice): progress events, files, bad input named, glossary."""

from __future__ import annotations

import io
import json

import httpx
import pytest
import soundfile

from tests.provenance_check import ai_credentials


def _events(answer: httpx.Response) -> list[dict]:
    return [json.loads(line[len("data: ") :]) for line in answer.text.splitlines() if line.startswith("data: ")]


@pytest.fixture(scope="module")
def voices(api_app, make_speech):
    for name, sentence in (
        ("Anna", "The quick brown fox jumps over the lazy dog."),
        ("Bob", "A journey of a thousand miles begins with one step."),
    ):
        with open(make_speech(sentence, seconds=4.0), "rb") as audio:
            answer = httpx.post(
                api_app.url + "v1/voices",
                data={"name": name, "transcript": sentence},
                files={"audio": ("voice.wav", audio, "audio/wav")},
                timeout=300,
            )
        assert answer.status_code in (201, 409), answer.text
    return api_app


def test_a_dialogue_streams_progress_then_its_files(voices):
    app = voices
    body = {
        "script": "Anna: Hello Bob.\n[S2] Hi Anna.\nAnna: Bye.",
        "cast": {"S2": "Bob"},
        "pause_s": 0.25,
        "top_k": 30,
    }
    answer = httpx.post(app.url + "v1/longform/dialogue", json=body, timeout=600)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    events = _events(answer)
    assert [e["done"] for e in events if e["type"] == "progress"] == [1, 2, 3]
    done = events[-1]
    assert done["type"] == "done" and done["done"] == 3 and not done["partial"]
    wav = next(name for name in done["files"] if name.endswith(".wav"))
    data = httpx.get(app.url + f"v1/longform/files/{wav}", timeout=60).content
    audio, rate = soundfile.read(io.BytesIO(data))
    made = ai_credentials(data, "wav")["org.cosyvoice-mac.generation"]  # the joined file names what made its lines
    assert made["long_form_kind"] == "dialogue" and made["model"] and made["engine"] and len(made["voice_hashes"]) == 2
    timing_name = next(name for name in done["files"] if name.endswith(".timing.json"))
    timing = httpx.get(app.url + f"v1/longform/files/{timing_name}", timeout=60).json()["lines"]
    assert [t["voice"] for t in timing] == ["Anna", "Bob", "Anna"]
    assert timing[-1]["end"] == pytest.approx(len(audio) / rate, abs=0.01)
    sidecar = next(name for name in done["files"] if name.endswith(".json") and not name.endswith(".timing.json"))
    facts = httpx.get(app.url + f"v1/longform/files/{sidecar}", timeout=60).json()
    assert facts["sampling"] == {"temperature": None, "top_p": None, "top_k": 30, "repetition_window": None}


def test_a_subtitle_file_is_dubbed(voices):
    srt = "1\n00:00:00,500 --> 00:00:02,500\nHello there.\n\n2\n00:00:03,000 --> 00:00:05,000\nGoodbye now.\n"
    answer = httpx.post(
        voices.url + "v1/longform/dub",
        data={"voice": "Anna", "speed_limit": "1.5"},
        files={"file": ("scene.srt", srt.encode(), "text/plain")},
        timeout=600,
    )
    done = _events(answer)[-1]
    assert done["type"] == "done" and done["done"] == 2, done
    wav = next(name for name in done["files"] if name.endswith(".wav"))
    info = soundfile.info(io.BytesIO(httpx.get(voices.url + f"v1/longform/files/{wav}", timeout=60).content))
    assert info.duration >= 4.9


@pytest.mark.parametrize(
    "path, kwargs, status, words",
    [
        ("v1/longform/dialogue", {"json": {"script": "Anna: hi\nno tag here"}}, 400, "line 2 has no speaker tag"),
        ("v1/longform/dialogue", {"json": {"script": "Zed: hi"}}, 400, "speaker 'Zed' has no voice"),
        ("v1/longform/dialogue", {"json": {"script": "Anna: hi", "output": "/etc/passwd"}}, 400, "output"),
        # a pause out of range was an error event after the 200, its param null
        ("v1/longform/dialogue", {"json": {"script": "Anna: hi", "pause_s": 99}}, 400, '"param": "pause_s"'),
        ("v1/longform/dialogue", {"json": {"script": "Anna: hi", "pause_s": -1}}, 400, "pause between lines"),
        (
            "v1/longform/dub",
            {"data": {"voice": "Anna"}, "files": {"file": ("x.srt", b"1\n00:00:02,000 --> 00:00:01,000\nA\n")}},
            400,
            "cue 1: it ends",
        ),
        (
            "v1/longform/dub",
            {"data": {"voice": "Nobody"}, "files": {"file": ("x.srt", b"1\n00:00:01,000 --> 00:00:02,000\nA\n")}},
            404,
            "there is no voice 'Nobody'",
        ),
        # sampling out of range: a 400 naming the field before the job starts, JSON or multipart alike
        ("v1/longform/dialogue", {"json": {"script": "Anna: hi", "top_k": 0}}, 400, '"param": "top_k"'),
        (
            "v1/longform/dub",
            {
                "data": {"voice": "Anna", "temperature": "9"},
                "files": {"file": ("x.srt", b"1\n00:00:01,000 --> 00:00:02,000\nA")},
            },
            400,
            '"param": "temperature"',
        ),
        (
            "v1/longform/batch",
            {"data": {"name": "b", "top_p": "0"}, "files": {"file": ("x.txt", b"hi\n")}},
            400,
            "top_p",
        ),
        (
            "v1/longform/dub",
            {
                "data": {"voice": "Anna", "style": "loud"},
                "files": {"file": ("x.srt", b"1\n00:00:01,000 --> 00:00:02,000\nA\n")},
            },
            404,
            "no 'loud' recording; its styles: neutral",
        ),
        ("v1/longform/batch", {"data": {"name": "../up"}, "files": {"file": ("x.txt", b"hi\n")}}, 400, "batch name"),
        ("v1/longform/files/..%2F..%2Fetc%2Fpasswd", {}, 404, ""),
    ],
)
def test_bad_long_form_requests_are_named_errors(voices, path, kwargs, status, words):
    method = httpx.get if path.startswith("v1/longform/files") else httpx.post
    answer = method(voices.url + path, timeout=60, **kwargs)
    assert answer.status_code == status, answer.text
    if words:
        assert words in answer.json()["error"]["message"] or words in json.dumps(answer.json())
    assert "Traceback" not in answer.text


def test_the_glossary_is_read_and_replaced_whole(voices):
    bad = httpx.put(voices.url + "v1/glossary", json={"entries": [{"key": "x", "replacement": "[zz][qq]"}]})
    assert bad.status_code == 400 and "row 1 ('x')" in bad.json()["error"]["message"]
    good = httpx.put(
        voices.url + "v1/glossary",
        json={"entries": [{"key": "minute", "replacement": "[M][AY0][N][UW1][T]", "language": "en"}]},
    )
    assert good.status_code == 200
    assert httpx.get(voices.url + "v1/glossary").json()["data"] == [
        {"key": "minute", "replacement": "[M][AY0][N][UW1][T]", "language": "en"}
    ]
    httpx.put(voices.url + "v1/glossary", json={"entries": []})
