"""The bad-input matrix, from outside: every kind gets a clear, specific message (no traceback, no raw
exception name), quickly, and leaves nothing in outputs/ — through the page's API and through the CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from gradio_client import handle_file
from gradio_client.exceptions import AppError

from tests.reliability.bad_files import write_bad_files
from tests.reliability.server import GENERATE_OFF, JOB_S, REPO_ROOT

RAW_ERROR = re.compile(r"Traceback|\b(?:Value|Type|Index|Key|Attribute|Runtime|OS|Zero)Error\b|Exception")
PROMPT_MSG, COUNTER, MODE_MSG, STATUS = range(4)
GRADIO = "gradio"  # refused by Gradio's own check of the component's value, before our code runs
TRANSCRIPT = "This is the voice I would like you to copy, please."


@pytest.fixture(scope="module")
def files(tmp_path_factory, speech):
    return write_bad_files(tmp_path_factory.mktemp("bad-files"), speech)


# (id, audio key or None, text, mode, transcript, instruct, seed, speed, where the message is, words in it)
GENERATE_CASES = [
    ("no_prompt", None, "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "Upload or record a prompt"),
    ("empty_text", "speech", "", "cross_lingual", "", "", 1, 1.0, COUNTER, "no text to speak"),
    ("blank_text", "speech", " \n\t ", "cross_lingual", "", "", 1, 1.0, COUNTER, "no text to speak"),
    ("text_too_long", "speech", "x" * 5001, "cross_lingual", "", "", 1, 1.0, COUNTER, "5001 / 5000"),
    ("zero_shot_no_transcript", "speech", "Hello.", "zero_shot", "", "", 1, 1.0, PROMPT_MSG, "transcript"),
    ("instruct_no_instruction", "speech", "Hello.", "instruct", "", " ", 1, 1.0, MODE_MSG, "instruction"),
    ("unknown_mode", "speech", "Hello.", "bogus", "", "", 1, 1.0, GRADIO, "not in the list of choices"),
    ("seed_negative", "speech", "Hello.", "cross_lingual", "", "", -1, 1.0, GRADIO, "less than minimum value 0"),
    ("seed_too_big", "speech", "Hello.", "cross_lingual", "", "", 2**31, 1.0, GRADIO, "greater than maximum"),
    ("seed_huge", "speech", "Hello.", "cross_lingual", "", "", 2**70, 1.0, GRADIO, "greater than maximum"),
    ("speed_too_slow", "speech", "Hello.", "cross_lingual", "", "", 1, 0.1, GRADIO, "less than minimum value"),
    ("speed_too_fast", "speech", "Hello.", "cross_lingual", "", "", 1, 10.0, GRADIO, "greater than maximum"),
    # The voice menu takes any name (a tick may carry a voice a delete just took off the menu); the callback
    # refuses one the library does not hold, under the prompt.
    ("unknown_saved_voice", None, "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "no saved voice named"),
    ("text_file_as_wav", "text_as_wav", "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "not an audio file"),
    ("zero_byte_file", "zero_bytes", "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "empty file"),
    ("nan_samples", "nan", "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "invalid samples"),
    ("infinite_samples", "inf", "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "invalid samples"),
    ("8khz_prompt", "8khz", "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "8000 Hz"),
    ("silent_prompt", "silent", "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "silent"),
    ("half_second_prompt", "half_second", "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "at least"),
    ("forty_second_prompt", "forty_seconds", "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "at most"),
    ("wav_header_only", "header_only", "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "no audio samples"),
    ("random_bytes_mp3", "random_mp3", "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "noise.mp3"),
    ("png_as_wav", "png_as_wav", "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "not an audio"),
    ("one_frame_wav", "one_frame", "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "⚠️"),
    ("zero_rate_header", "bad_rate_header", "Hello.", "cross_lingual", "", "", 1, 1.0, PROMPT_MSG, "⚠️"),
    (
        "script_tag",
        "speech",
        "<script>alert(1)</script> Hello.",
        "cross_lingual",
        "",
        "",
        1,
        1.0,
        STATUS,
        "&#60;script&#62;",
    ),
    (
        "language_tag",
        "speech",
        "<|en|>Hello there.",
        "cross_lingual",
        "",
        "",
        1,
        1.0,
        STATUS,
        "&#60;&#124;en&#124;&#62;",
    ),
    ("only_punctuation", "speech", "!!! ??? ...", "cross_lingual", "", "", 1, 1.0, COUNTER, "nothing to speak"),
    ("only_emoji", "speech", "😀😀😀", "cross_lingual", "", "", 1, 1.0, COUNTER, "nothing to speak"),
]


def _outputs(app) -> set[str]:
    return {path.name for path in app.outputs.glob("*.wav")}


@pytest.mark.parametrize("case", GENERATE_CASES, ids=[case[0] for case in GENERATE_CASES])
def test_generate_refuses_bad_input_clearly(app, client, files, case):
    name, audio, text, mode, transcript, instruct, seed, speed, where, words = case
    before = _outputs(app)
    started = time.monotonic()
    try:
        voice = "Nobody" if name == "unknown_saved_voice" else ""
        answer = app.call(
            client,
            "/generate",
            "en",
            handle_file(files[audio]) if audio else None,
            voice,
            transcript,
            text,
            mode,
            instruct,
            seed,
            speed,
            False,
            *GENERATE_OFF,
        )
    except AppError as refusal:
        assert where == GRADIO and words in str(refusal), (name, refusal)
        message = "⚠️ " + str(refusal)
    else:
        assert where != GRADIO, (name, answer[:4])
        message = answer[where] or ""
        assert words in message, (name, answer[:4])
    assert message.startswith("⚠️") and not RAW_ERROR.search(message), message
    assert "cosyvoice3" not in message  # the preview voice is speaking, not CosyVoice3
    assert time.monotonic() - started < JOB_S / 2
    assert _outputs(app) == before  # nothing was made


def test_an_unknown_language_is_refused_by_the_language_menu(app, client):
    for endpoint, args in (
        ("/generate", ("xx", None, "", "", "", "cross_lingual", "", 1, 1.0, False, *GENERATE_OFF)),
        ("/counter", ("<script>", "abc")),
    ):
        with pytest.raises(AppError, match="not in the list of choices"):
            app.call(client, endpoint, *args)


@pytest.mark.parametrize(
    "name, audio, words",
    [
        ("", "speech", "Type a name"),
        ("x" * 65, "speech", "printable characters"),
        ("evil\u202egnp.exe", "speech", "text-direction"),
        ("tab\there", "speech", "printable"),
        ("Fine name", None, "Upload or record the prompt audio"),
        ("Fine name", "nan", "invalid samples"),
        ("Fine name", "zero_bytes", "empty file"),
    ],
    ids=["empty_name", "name_too_long", "bidi_name", "control_in_name", "no_audio", "nan_audio", "empty_audio"],
)
def test_save_voice_refuses_bad_input_clearly(app, client, files, name, audio, words):
    message = app.call(client, "/save_voice", "en", name, handle_file(files[audio]) if audio else None, "")[0]
    assert words in message and message.startswith("⚠️") and not RAW_ERROR.search(message), message


def test_a_voice_named_like_html_is_saved_and_shown_as_text(app, client, files):
    name = "<img src=x onerror=alert(1)>"
    saved = app.call(client, "/save_voice", "en", name, handle_file(files["speech"]), TRANSCRIPT, timeout=2 * JOB_S)
    assert saved[0].startswith("✅") and "<img" not in saved[0] and "&#60;img" in saved[0], saved[0]
    choices = [choice[1] for choice in app.call(client, "/on_load", "en")[0]["choices"]]
    assert name in choices  # a menu shows text, so the name itself is listed
    picked = app.call(client, "/voice_picked", "en", name, "")
    assert "<img" not in picked[1] and "&#60;img" in picked[1]
    deleted = app.call(client, "/delete_voice", "en", name)
    assert "<img" not in deleted[0]


@pytest.mark.parametrize(
    "endpoint, args, check",
    [
        ("/delete_voice", ("en", "Nobody"), lambda out: "no saved voice named" in out[0]),
        ("/delete_voice", ("en", ""), lambda out: "Pick a saved voice" in out[0]),
        ("/voice_picked", ("en", "../../etc/passwd", ""), lambda out: "no saved voice named" in out[1]),
        ("/history_picked", ("../../../etc/passwd",), lambda out: out is None),
        ("/switch_model", ("en", "/etc"), lambda out: "State" in out[1]),
        ("/switch_vocoder", ("en", "bogus"), lambda out: "State" in out[1]),
    ],
    ids=[
        "delete_unknown",
        "delete_nothing",
        "pick_traversal",
        "history_traversal",
        "switch_unknown_model",
        "switch_unknown_vocoder",
    ],
)
def test_other_controls_refuse_values_they_never_offered(app, client, endpoint, args, check):
    try:
        answer = app.call(client, endpoint, *args)
    except AppError as refusal:  # Gradio's own check: only values the menu offered
        assert "not in the list of choices" in str(refusal) and not RAW_ERROR.search(str(refusal))
    else:
        assert check(answer), answer


def test_an_upload_that_is_not_audio_is_taken_out_again(app, client, files):
    message, _, audio = app.call(client, "/prompt_uploaded", "en", handle_file(files["png_as_wav"]))
    assert "not an audio file" in message and audio is None


# -- the CLI -------------------------------------------------------------------------------------------
def _model_folders(root: Path) -> dict[str, str]:
    empty, both, broken = root / "empty", root / "both", root / "broken"
    for folder in (empty, both, broken):
        folder.mkdir(parents=True, exist_ok=True)
    (both / "cosyvoice2.yaml").write_text("a: 1\n")
    (both / "cosyvoice3.yaml").write_text("a: 1\n")
    (broken / "cosyvoice3.yaml").write_text("{{{ not: yaml ::\n")
    (root / "file.txt").write_text("x")
    return {
        "empty": str(empty),
        "both": str(both),
        "broken": str(broken),
        "file": str(root / "file.txt"),
        "missing": str(root / "no-such-folder"),
    }


CLI_CASES = [
    ("no_arguments", [], "usage"),
    ("unknown_command", ["fly"], "invalid choice"),
    ("no_text", ["synth", "--model", "{missing}", "--prompt-wav", "{speech}", "--out", "o.wav"], "--text"),
    (
        "speed_not_a_number",
        [
            "synth",
            "--model",
            "{missing}",
            "--prompt-wav",
            "{speech}",
            "--text",
            "Hi",
            "--out",
            "o.wav",
            "--speed",
            "fast",
        ],
        "invalid float",
    ),
    (
        "seed_not_a_number",
        ["synth", "--model", "{missing}", "--prompt-wav", "{speech}", "--text", "Hi", "--out", "o.wav", "--seed", "x"],
        "invalid int",
    ),
    (
        "unknown_vocoder",
        [
            "synth",
            "--model",
            "{missing}",
            "--prompt-wav",
            "{speech}",
            "--text",
            "Hi",
            "--out",
            "o.wav",
            "--vocoder",
            "metal",
        ],
        "invalid choice",
    ),
    (
        "unknown_compute_units",
        [
            "synth",
            "--model",
            "{missing}",
            "--prompt-wav",
            "{speech}",
            "--text",
            "Hi",
            "--out",
            "o.wav",
            "--compute-units",
            "GPU",
        ],
        "invalid choice",
    ),
    (
        "model_and_random_weights",
        [
            "synth",
            "--model",
            "{missing}",
            "--random-weights",
            "cosyvoice3",
            "--prompt-wav",
            "{speech}",
            "--text",
            "Hi",
            "--out",
            "o.wav",
        ],
        "not allowed",
    ),
    (
        "missing_model_folder",
        ["synth", "--model", "{missing}", "--prompt-wav", "{speech}", "--text", "Hi", "--out", "o.wav"],
        "error:",
    ),
    (
        "model_is_a_file",
        ["synth", "--model", "{file}", "--prompt-wav", "{speech}", "--text", "Hi", "--out", "o.wav"],
        "error:",
    ),
    (
        "empty_model_folder",
        ["synth", "--model", "{empty}", "--prompt-wav", "{speech}", "--text", "Hi", "--out", "o.wav"],
        "download",
    ),
    (
        "two_model_configs",
        ["synth", "--model", "{both}", "--prompt-wav", "{speech}", "--text", "Hi", "--out", "o.wav"],
        "keep one",
    ),
]


def _cli(arguments: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "cosyvoice_mac", *arguments],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_S,
        check=False,
    )


def test_the_cli_refuses_bad_input_clearly(tmp_path, speech):
    places = {**_model_folders(tmp_path), "speech": speech}
    runs = [[part.format(**places) for part in arguments] for _, arguments, _ in CLI_CASES]
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda arguments: _cli(arguments, tmp_path), runs))
    for (name, _, words), result in zip(CLI_CASES, results):
        said = result.stderr + result.stdout
        assert result.returncode == 2, (name, result.returncode, said[-2000:])
        assert words in said, (name, said[-2000:])
        assert "Traceback" not in said, (name, said[-2000:])
    assert not (tmp_path / "o.wav").exists()
