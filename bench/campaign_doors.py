"""The bad inputs of ``bench/campaign.py``, door by door: each probe sends one bad input and returns what came
back as an ``Answer``, which the campaign judges (``campaign.judge``). The page's own cases (``GENERATE_CASES``)
and the CLI's usage cases (``CLI_CASES``) are the reliability suite's lists, not copies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
from gradio_client import handle_file
from gradio_client.exceptions import AppError

from cosyvoice_mac.request import MAX_INSTRUCT_CHARS, MAX_TEXT_CHARS
from tests.reliability.server import JOB_S, POST_OFF, REPO_ROOT
from tests.reliability.test_bad_input import CLI_CASES, GENERATE_CASES, _model_folders
from tests.reliability.test_refusals import UNCLOSED


@dataclass
class Answer:
    """One probe's answer: an HTTP status (None for a Gradio event or the CLI), the words a user reads, and
    for the CLI its exit code."""

    door: str
    case: str
    status: int | None
    text: str
    exit_code: int | None = None
    accepted: bool = False  # the door took the bad input as good (a job ran, a file was made)


GOOD_GRADIO = ["Hello.", "preview", "", "", 1, 1.0, False, None]
GRADIO_FIELDS = ("text", "voice", "instructions", "prompt_text", "seed", "speed", "trim", "loudness_lufs")
GOOD_V1 = {"model": "tts-1", "voice": "preview", "input": "Hello.", "response_format": "wav"}


def _with(index: int, value) -> list:
    data = list(GOOD_GRADIO)
    data[index] = value
    return data


GRADIO_CASES = [
    *[
        (f"{GRADIO_FIELDS[index]}={json.dumps(value)[:20]}", _with(index, value))
        for index, values in (
            (0, ["", "   ", "x" * (MAX_TEXT_CHARS + 1), 123, ["a"], "!!! ???", "😀😀", None]),
            (1, ["", "Nobody", "../../etc/passwd", 5, None]),
            (2, ["x" * (MAX_INSTRUCT_CHARS + 1), 123]),
            (3, [123, ["a"]]),
            (4, ["abc", [1], {"x": 1}, -5, 2**40, 2**70]),
            (5, ["fast", {}, 0, -1, 100, [1]]),
            (6, ["yes", 3, [True]]),
            (7, ["loud", -200, 200, []]),
        )
        for value in values
    ],
    ("no_inputs", []),
    ("one_input", ["Hi."]),
    ("eleven_inputs", [*GOOD_GRADIO, 1, 2, 3]),
]
GRADIO_BODIES = [("data_not_a_list", {"data": "Hello."}), ("data_null", {"data": None}), ("no_data", {})]


def gradio_rest(http: httpx.Client) -> Iterator[Answer]:
    """``/gradio_api/call/synthesize`` as curl calls it: the POST's refusal, or the event stream's words."""
    bodies = [(name, {"data": data}) for name, data in GRADIO_CASES] + GRADIO_BODIES
    for name, body in [*bodies, ("not_json", b"{not json"), ("a_list", b"[1, 2]")]:
        if isinstance(body, bytes):
            started = http.post(
                "/gradio_api/call/synthesize", content=body, headers={"Content-Type": "application/json"}
            )
        else:
            started = http.post("/gradio_api/call/synthesize", json=body)
        if started.status_code != 200:
            yield Answer("gradio_api", name, started.status_code, started.text)
            continue
        stream = http.get(f"/gradio_api/call/synthesize/{started.json()['event_id']}").text
        yield Answer("gradio_api", name, None, stream, accepted="event: complete" in stream)


def _v1_body(**change) -> dict:
    body = dict(GOOD_V1)
    for key, value in change.items():
        if value is ...:
            body.pop(key, None)
        else:
            body[key] = value
    return body


V1_SPEECH_CASES = [
    ("input_missing", _v1_body(input=...)),
    ("input_empty", _v1_body(input="")),
    ("input_blank", _v1_body(input=" \n ")),
    ("input_too_long", _v1_body(input="x" * (MAX_TEXT_CHARS + 1))),
    ("input_number", _v1_body(input=123)),
    ("input_null", _v1_body(input=None)),
    ("input_list", _v1_body(input=["a"])),
    ("input_only_punctuation", _v1_body(input="!!! ???")),
    ("voice_missing", _v1_body(voice=...)),
    ("voice_empty", _v1_body(voice="")),
    ("voice_unknown", _v1_body(voice="Nobody")),
    ("voice_traversal", _v1_body(voice="../../etc/passwd")),
    ("voice_number", _v1_body(voice=5)),
    ("voice_unknown_id", _v1_body(voice={"id": "nope"})),
    ("format_exe", _v1_body(response_format="exe")),
    ("format_number", _v1_body(response_format=5)),
    ("speed_text", _v1_body(speed="fast")),
    ("speed_too_slow", _v1_body(speed=0.1)),
    ("speed_too_fast", _v1_body(speed=10)),
    ("speed_negative", _v1_body(speed=-1)),
    ("seed_text", _v1_body(seed="x")),
    ("seed_negative", _v1_body(seed=-5)),
    ("seed_huge", _v1_body(seed=2**70)),
    ("seed_fraction", _v1_body(seed=1.5)),
    ("stream_text", _v1_body(stream="maybe")),
    ("stream_format_video", _v1_body(stream_format="video")),
    ("trim_text", _v1_body(trim="yes")),
    ("loudness_text", _v1_body(loudness_lufs="loud")),
    ("loudness_too_low", _v1_body(loudness_lufs=-200)),
    ("loudness_too_high", _v1_body(loudness_lufs=200)),
    ("instructions_number", _v1_body(instructions=123)),
    ("instructions_too_long", _v1_body(instructions="x" * (MAX_INSTRUCT_CHARS + 1))),
    ("prompt_text_number", _v1_body(prompt_text=123)),
    ("model_unknown", _v1_body(model="gpt-9")),
    ("model_number", _v1_body(model=5)),
]
RAW_BODIES = [
    ("not_json", b"{not json", "application/json"),
    ("a_list", b"[1, 2]", "application/json"),
    ("a_string", b'"Hello."', "application/json"),
    ("empty_body", b"", "application/json"),
    ("text_plain", json.dumps(GOOD_V1).encode(), "text/plain"),
    ("invalid_utf8", b'{"input": "\xff\xfe", "voice": "preview", "model": "tts-1"}', "application/json"),
]


def v1_speech(http: httpx.Client) -> Iterator[Answer]:
    for name, body in V1_SPEECH_CASES:
        answer = http.post("/v1/audio/speech", json=body)
        yield Answer("v1", f"speech:{name}", answer.status_code, _text(answer), answer.status_code < 400)
    for name, raw, kind in RAW_BODIES:
        answer = http.post("/v1/audio/speech", content=raw, headers={"Content-Type": kind})
        yield Answer("v1", f"speech:{name}", answer.status_code, _text(answer), answer.status_code < 400)


def _text(answer: httpx.Response) -> str:
    kind = answer.headers.get("content-type", "")
    return answer.text if "json" in kind or "text" in kind else f"<{len(answer.content)} bytes of {kind}>"


def _file(path: str):
    return (Path(path).name, Path(path).read_bytes(), "audio/wav")


# A conversion's source (what is re-spoken, not the voice) may be telephone audio or long: not bad inputs there.
SOURCE_MAY_BE = ("8khz", "forty_seconds")


def v1_uploads(http: httpx.Client, files: dict[str, str]) -> Iterator[Answer]:
    """Every bad recording to every /v1 route that takes one, and the other /v1 refusals of a field."""
    bad = [key for key in files if key != "speech"]
    body = json.dumps({"model": "tts-1", "input": "Hello.", "response_format": "wav"})
    probes = []
    for key in bad:
        probes += [
            (
                f"voices:{key}",
                "POST",
                "/v1/voices",
                {"data": {"name": f"Bad {key}"}, "files": {"audio": _file(files[key])}},
            ),
            (
                f"recording:{key}",
                "POST",
                "/v1/audio/speech/recording",
                {"data": {"body": body}, "files": {"prompt_audio": _file(files[key])}},
            ),
        ]
        if key not in SOURCE_MAY_BE:
            probes.append(
                (
                    f"conversion:{key}",
                    "POST",
                    "/v1/audio/voice-conversion",
                    {"data": {"voice": "preview"}, "files": {"audio": _file(files[key])}},
                )
            )
    speech = {"audio": _file(files["speech"])}
    probes += [
        ("voices:no_audio", "POST", "/v1/voices", {"data": {"name": "No audio"}}),
        ("voices:no_name", "POST", "/v1/voices", {"files": speech}),
        ("voices:empty_name", "POST", "/v1/voices", {"data": {"name": ""}, "files": speech}),
        ("voices:long_name", "POST", "/v1/voices", {"data": {"name": "x" * 65}, "files": speech}),
        ("voices:bidi_name", "POST", "/v1/voices", {"data": {"name": "evil\u202egnp.exe"}, "files": speech}),
        ("voices:control_name", "POST", "/v1/voices", {"data": {"name": "tab\there"}, "files": speech}),
        ("voices:replace_unknown", "PUT", "/v1/voices/nope", {"files": speech}),
        ("voices:rename_unknown", "PATCH", "/v1/voices/nope", {"json": {"name": "x"}}),
        ("voices:rename_nothing", "PATCH", "/v1/voices/nope", {"json": {}}),
        ("voices:rename_extra", "PATCH", "/v1/voices/nope", {"json": {"colour": "red"}}),
        ("voices:delete_unknown", "DELETE", "/v1/voices/nope", {}),
        ("models:unknown", "GET", "/v1/models/gpt-9", {}),
        ("recording:no_audio", "POST", "/v1/audio/speech/recording", {"data": {"body": body}}),
        (
            "recording:body_not_json",
            "POST",
            "/v1/audio/speech/recording",
            {"data": {"body": "{x"}, "files": {"prompt_audio": speech["audio"]}},
        ),
        (
            "recording:names_a_voice",
            "POST",
            "/v1/audio/speech/recording",
            {
                "data": {"body": json.dumps({**json.loads(body), "voice": "preview"})},
                "files": {"prompt_audio": speech["audio"]},
            },
        ),
        ("conversion:no_audio", "POST", "/v1/audio/voice-conversion", {"data": {"voice": "preview"}}),
        (
            "conversion:unknown_voice",
            "POST",
            "/v1/audio/voice-conversion",
            {"data": {"voice": "Nobody"}, "files": speech},
        ),
        (
            "conversion:format_exe",
            "POST",
            "/v1/audio/voice-conversion",
            {"data": {"voice": "preview", "response_format": "exe"}, "files": speech},
        ),
        (
            "conversion:speed_text",
            "POST",
            "/v1/audio/voice-conversion",
            {"data": {"voice": "preview", "speed": "fast"}, "files": speech},
        ),
        (
            "conversion:stream_format_video",
            "POST",
            "/v1/audio/voice-conversion",
            {"data": {"voice": "preview", "stream_format": "video"}, "files": speech},
        ),
        ("dialogue:empty_script", "POST", "/v1/longform/dialogue", {"json": {"script": ""}}),
        (
            "dialogue:unknown_voice",
            "POST",
            "/v1/longform/dialogue",
            {"json": {"script": "[A] Hi.", "cast": {"A": "Nobody"}}},
        ),
        ("dialogue:pause_text", "POST", "/v1/longform/dialogue", {"json": {"script": "[A] Hi.", "pause_s": "long"}}),
        ("dialogue:extra_field", "POST", "/v1/longform/dialogue", {"json": {"script": "[A] Hi.", "colour": 1}}),
        (
            "batch:unclosed_quote",
            "POST",
            "/v1/longform/batch",
            {"files": {"file": ("b.csv", UNCLOSED.encode(), "text/csv")}},
        ),
        ("batch:empty_csv", "POST", "/v1/longform/batch", {"files": {"file": ("b.csv", b"", "text/csv")}}),
        ("batch:binary", "POST", "/v1/longform/batch", {"files": {"file": ("b.csv", os.urandom(2000), "text/csv")}}),
        ("dub:no_file", "POST", "/v1/longform/dub", {"data": {"voice": "preview"}}),
        (
            "dub:not_subtitles",
            "POST",
            "/v1/longform/dub",
            {"data": {"voice": "preview"}, "files": {"file": ("s.srt", b"no cues", "text/plain")}},
        ),
        ("files:traversal", "GET", "/v1/longform/files/..%2f..%2fetc%2fpasswd", {}),
        ("files:unknown", "GET", "/v1/longform/files/nothing.wav", {}),
        (
            "glossary:not_json",
            "PUT",
            "/v1/glossary",
            {"content": b"{x", "headers": {"Content-Type": "application/json"}},
        ),
        ("glossary:empty_key", "PUT", "/v1/glossary", {"json": {"entries": [{"key": "", "replacement": "x"}]}}),
        (
            "glossary:bad_language",
            "PUT",
            "/v1/glossary",
            {"json": {"entries": [{"key": "a", "replacement": "b", "language": "xx"}]}},
        ),
    ]
    for name, method, path, options in probes:
        answer = http.request(method, path, **options)
        yield Answer("v1", name, answer.status_code, _text(answer), answer.status_code < 400)


def page_events(app, client, files: dict[str, str]) -> Iterator[Answer]:
    """The page's Generate event with the reliability suite's cases (its uploads included), and a few uploads
    named to escape the temp folder."""
    for name, audio, text, mode, transcript, instruct, seed, speed, where, _ in GENERATE_CASES:
        voice = "Nobody" if name == "unknown_saved_voice" else ""
        prompt = handle_file(files[audio]) if audio else None
        try:
            out = app.call(
                client,
                "/generate",
                "en",
                prompt,
                voice,
                transcript,
                text,
                mode,
                instruct,
                seed,
                speed,
                False,
                *POST_OFF,
            )
        except AppError as refusal:
            yield Answer("page", f"generate:{name}", None, "⚠️ " + str(refusal))
            continue
        shown = out[where] if isinstance(where, int) and where < len(out) and isinstance(out[where], str) else ""
        yield Answer("page", f"generate:{name}", None, shown, accepted=not shown.startswith("⚠️"))
    for name in ("../../escape.wav", "/etc/escape.wav", "..\\..\\escape.wav", "a\x00b.wav", "x" * 300 + ".wav"):
        answer = httpx.post(
            app.url + "gradio_api/upload", files={"files": (name, b"RIFF0000WAVE", "audio/wav")}, timeout=JOB_S
        )
        escaped = any(path.name.startswith("escape") for path in app.root.glob("*")) or Path("/etc/escape.wav").exists()
        yield Answer("upload", f"name:{name[:24]!r}", answer.status_code, answer.text, accepted=escaped)


def cli(app, root: Path, files: dict[str, str]) -> Iterator[Answer]:
    """The CLI's usage cases, and bad requests handed to the running app (``--server``)."""
    places = {**_model_folders(root), "speech": files["speech"]}
    runs = [(name, [part.format(**places) for part in arguments]) for name, arguments, _ in CLI_CASES]
    server = ["--server", app.url]
    runs += [
        ("server_empty_text", ["synth", "--voice", "preview", "--text", "", "--out", "o.wav", *server]),
        ("server_unknown_voice", ["synth", "--voice", "Nobody", "--text", "Hi.", "--out", "o.wav", *server]),
        (
            "server_speed_range",
            ["synth", "--voice", "preview", "--text", "Hi.", "--speed", "9", "--out", "o.wav", *server],
        ),
        ("server_text_too_long", ["synth", "--voice", "preview", "--text", "x" * 5001, "--out", "o.wav", *server]),
        (
            "server_bad_prompt",
            ["synth", "--prompt-wav", str(root / "file.txt"), "--text", "Hi.", "--out", "o.wav", *server],
        ),
        ("server_unclosed_csv", ["batch", str(root / "unclosed.csv"), "--out-dir", str(root / "batch"), *server]),
        (
            "server_unreachable",
            ["synth", "--voice", "preview", "--text", "Hi.", "--out", "o.wav", "--server", "http://127.0.0.1:9/"],
        ),
        ("voices_add_silent", ["voices", "add", "Silent", "--audio", files["silent"], *server]),
        ("voices_add_forty_seconds", ["voices", "add", "Long", "--audio", files["forty_seconds"], *server]),
        ("voices_add_no_audio", ["voices", "add", "Nothing", *server]),
    ]
    (root / "unclosed.csv").write_text(UNCLOSED)
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(REPO_ROOT), "NO_PROXY": "127.0.0.1"}
    for name, arguments in runs:
        done = subprocess.run(
            [sys.executable, "-m", "cosyvoice_mac", *arguments],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=2 * JOB_S,
            check=False,
        )
        made = (root / "o.wav").exists()
        (root / "o.wav").unlink(missing_ok=True)
        yield Answer("cli", name, None, done.stderr + done.stdout, done.returncode, accepted=made)
