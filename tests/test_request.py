"""One request contract: the rules, the mode and the seed are decided once, and every layer agrees.

Each test here pins a disagreement the layers used to have (issue 15): a blank transcript reported as
zero-shot while the pipeline spoke cross-lingual; limits that differed between page, engine and pipeline;
a prepared voice whose transcript was ignored; a new prompt decoded five times per request; a CLI that
let through what the page refused (issue 16 items 6 and 10).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cosyvoice_mac.errors import CosyVoiceError, RequestError
from cosyvoice_mac.request import MAX_SEED, MAX_TEXT_CHARS, SPEED_RANGE, Request, Voice
from tests.fakes.onnx_models import make_tiny_model_dir

REPO = Path(__file__).resolve().parents[1]
TRANSCRIPT = "Hello there, this is a short prompt for testing."


@pytest.fixture(scope="module")
def prompt_wav(make_speech) -> Path:
    return make_speech(TRANSCRIPT, seconds=3.0)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    return make_tiny_model_dir("cosyvoice3", tmp_path_factory.mktemp("tiny3"))


@pytest.fixture(scope="module")
def model(tiny_folder):
    from cosyvoice_mac.pipeline import CosyVoice

    return CosyVoice.from_pretrained(tiny_folder, device="cpu")


@pytest.fixture(scope="module")
def runtime(tiny_folder, tmp_path_factory):
    """The worker's runtime in this process (no spawn), on the tiny model; ``runtime.sent`` holds its events."""
    from cosyvoice_mac.engine.runtime import WorkerRuntime
    from cosyvoice_mac.engine.worker import WorkerConfig

    root = tmp_path_factory.mktemp("runtime")
    sent: list = []
    config = WorkerConfig(
        model_dir=str(tiny_folder),
        device="cpu",
        outputs_dir=str(root / "outputs"),
        cache_dir=str(root / "cache"),
        warmup_text="Hi.",
    )
    worker = WorkerRuntime(config, sent.append)
    worker.load()
    worker.sent = sent
    return worker


def _run(runtime, request: Request):
    from cosyvoice_mac.engine.jobs import Job

    job = Job(request)
    runtime.sent.clear()
    runtime.run(job, should_stop=lambda: False)
    terminal = runtime.sent[-1]
    assert terminal.kind == "done", terminal
    return terminal.result, [event for event in runtime.sent if event.kind == "progress"]


# -- the mode ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("transcript", ["   ", "\n\t", ""])
def test_a_blank_transcript_is_cross_lingual_in_the_result_the_sidecar_and_the_pipeline(
    runtime, prompt_wav, transcript
):
    request = Request.build("Hello world.", Voice.recording(prompt_wav, transcript=transcript), seed=3)
    assert request.mode == "cross_lingual" and request.transcript is None
    result, progress = _run(runtime, request)
    sidecar = json.loads(Path(result.sidecar_path).read_text())
    assert result.mode == sidecar["mode"] == "cross_lingual"
    assert sidecar["prompt_text"] is None and sidecar["seed"] == 3
    assert {event.mode for event in progress} == {"cross_lingual"}  # what the pipeline actually ran


def test_a_saved_voice_s_transcript_makes_it_zero_shot_and_the_sidecar_says_so(runtime, prompt_wav):
    request = Request.build("Hello world.", Voice.recording(prompt_wav, transcript=f"  {TRANSCRIPT} "))
    assert request.mode == "zero_shot" and request.transcript == TRANSCRIPT
    result, progress = _run(runtime, request)
    sidecar = json.loads(Path(result.sidecar_path).read_text())
    assert result.mode == sidecar["mode"] == "zero_shot" and sidecar["prompt_text"] == TRANSCRIPT
    assert {event.mode for event in progress} == {"zero_shot"}


def test_the_seed_is_chosen_once_at_submission_and_recorded(runtime, prompt_wav):
    request = Request.build("Hello world.", Voice.recording(prompt_wav))
    assert 0 <= request.seed <= MAX_SEED
    result, _ = _run(runtime, request)
    assert result.seed == request.seed == json.loads(Path(result.sidecar_path).read_text())["seed"]


def test_a_mode_asked_for_must_be_possible_and_drops_what_it_does_not_use(prompt_wav):
    with pytest.raises(RequestError) as raised:
        Request.build("Hi.", Voice.recording(prompt_wav, transcript="  "), mode="zero_shot")
    assert raised.value.code == "transcript_needed" and raised.value.field == "transcript"
    with pytest.raises(RequestError) as raised:
        Request.build("Hi.", Voice.recording(prompt_wav), mode="instruct", instruct="")
    assert raised.value.code == "instruct_needed"
    crossed = Request.build(
        "Hi.", Voice.recording(prompt_wav, transcript=TRANSCRIPT), mode="cross_lingual", instruct="sadly"
    )
    assert crossed.transcript is None and crossed.instruct is None
    assert Request.build("Hi.", Voice.recording(prompt_wav, transcript=TRANSCRIPT), instruct=" x ").mode == "instruct"


# -- one set of limits ------------------------------------------------------------------------------
EDGES = [
    ({"text": "a" * MAX_TEXT_CHARS}, True),
    ({"text": "a" * (MAX_TEXT_CHARS + 1)}, False),
    ({"speed": SPEED_RANGE[0]}, True),
    ({"speed": SPEED_RANGE[0] - 0.01}, False),
    ({"speed": SPEED_RANGE[1]}, True),
    ({"speed": SPEED_RANGE[1] + 0.01}, False),
    ({"seed": MAX_SEED}, True),
    ({"seed": MAX_SEED + 1}, False),
    ({"seed": -1}, False),
    ({"text": "Hi\x00there."}, False),
    ({"text": "😀🎉"}, False),
    ({"text": "Line one.\nLine two.\tTabbed."}, True),
]


@pytest.mark.parametrize(("changes", "accepted"), EDGES)
def test_page_engine_and_pipeline_draw_the_same_lines(model, prompt_wav, changes, accepted, tmp_path):
    """The page's check, the Python API and the pipeline accept and refuse exactly the same requests."""
    from cosyvoice_mac.pipeline.prompts import plan_request
    from cosyvoice_mac.webui.generation import Generation

    values = {"text": "Hello world.", "speed": 1.0, "seed": 1, **changes}
    page = Generation(host=None, history=None)
    built, problem = page.build_request(
        "en", str(prompt_wav), None, "", values["text"], "cross_lingual", "", values["seed"], values["speed"]
    )
    assert (problem is None) == accepted, problem
    try:
        request = Request.build(values["text"], Voice.recording(prompt_wav), seed=values["seed"], speed=values["speed"])
    except RequestError:
        request = None
    assert (request is not None) == accepted
    if accepted:  # the pipeline takes what the request accepted, without a second set of numbers
        assert plan_request(model.version, model.normalizer, request).segments


def test_the_pipeline_refuses_what_the_request_refuses_with_the_same_error(model, prompt_wav):
    with pytest.raises(RequestError) as raised:
        list(model.synthesize("x" * (MAX_TEXT_CHARS + 1), voice=Voice.recording(prompt_wav)))
    assert raised.value.code == "text_too_long"
    with pytest.raises(RequestError) as raised:
        list(model.synthesize("Hi.", voice=Voice.recording(prompt_wav), speed=3.0))
    assert raised.value.code == "speed_invalid" and isinstance(raised.value, CosyVoiceError)


# -- the voice --------------------------------------------------------------------------------------
def test_a_prepared_voice_with_a_transcript_speaks_zero_shot(model, prompt_wav):
    speaker = model.prepare_prompt(prompt_wav, transcript=TRANSCRIPT)
    assert [piece.mode for piece in model.synthesize("Hello world.", speaker=speaker, seed=1)] == ["zero_shot"]
    assert [piece.mode for piece in model.synthesize("Hello world.", voice=speaker, seed=1)] == ["zero_shot"]
    recording = Voice.recording(prompt_wav, transcript=TRANSCRIPT)
    assert [piece.mode for piece in model.synthesize("Hello world.", voice=recording, seed=1)] == ["zero_shot"]
    bare = model.prepare_prompt(prompt_wav)
    assert [piece.mode for piece in model.synthesize("Hello world.", voice=bare, seed=1)] == ["cross_lingual"]


def test_a_new_prompt_is_decoded_once_per_request_and_a_known_one_not_at_all(runtime, make_speech, monkeypatch):
    from cosyvoice_mac.frontend import prompt_audio

    decodes: list[str] = []
    real = prompt_audio.decode_audio

    def counting(path, *args, **kwargs):
        decodes.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(prompt_audio, "decode_audio", counting)
    fresh = make_speech("A recording this worker has never heard before.", seconds=3.5)
    _run(runtime, Request.build("Hello world.", Voice.recording(fresh, transcript="A recording.")))
    assert len(decodes) == 1, decodes
    decodes.clear()
    _run(runtime, Request.build("Hello again.", Voice.recording(fresh)))
    assert decodes == []


def test_the_page_decodes_a_prompt_once_for_its_upload_check_and_generate(make_speech, monkeypatch):
    from cosyvoice_mac.sound import prompt_check
    from cosyvoice_mac.webui.generation import Generation

    reads: list[str] = []
    real = prompt_check.read_audio
    monkeypatch.setattr(prompt_check, "read_audio", lambda path: reads.append(str(path)) or real(path))
    upload = str(make_speech("The page checks this upload once.", seconds=3.0))
    assert prompt_check.checked_prompt(upload).ok  # on upload
    _, problem = Generation(host=None, history=None).build_request(
        "en", upload, None, "", "Hello.", "cross_lingual", "", 1, 1.0
    )
    assert problem is None and len(reads) == 1


# -- the CLI uses the same check (issue 16 items 6 and 10) -------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "cosyvoice_mac", *args], capture_output=True, text=True, timeout=300, env=env, cwd=REPO
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--seed", str(2**70)], f"from 0 to {MAX_SEED}"),
        (["--seed", "-1"], f"from 0 to {MAX_SEED}"),
        (["--instruct", ""], "instruct mode needs an instruction"),
        (["--text", "😀🎉✨"], "nothing to speak"),
        (["--text", "Hi\x01there."], "control character U+0001"),
        (["--speed", "3"], "out of range"),
    ],
)
def test_the_cli_answers_bad_requests_like_the_page_before_loading_a_model(tmp_path, prompt_wav, args, words):
    base = {"--text": "Hello.", "--seed": "1"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    flat = [item for pair in base.items() for item in pair]
    done = _cli(
        "synth",
        "--random-weights",
        "cosyvoice3",
        "--prompt-wav",
        str(prompt_wav),
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "o.wav"),
        *flat,
    )
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr
    assert "loaded" not in done.stderr  # refused before any model was built
    assert _page_problem(prompt_wav, base) is not None  # and the page refuses the same values


def _page_problem(prompt_wav, values: dict):
    """The page's own check of the same values: None when it would queue them."""
    from cosyvoice_mac.webui.generation import Generation

    seed = values["--seed"]
    mode = "instruct" if "--instruct" in values else "cross_lingual"
    _, problem = Generation(host=None, history=None).build_request(
        "en",
        str(prompt_wav),
        None,
        "",
        values["--text"],
        mode,
        values.get("--instruct", ""),
        float(seed) if seed.lstrip("-").isdigit() else seed,
        float(values.get("--speed", 1.0)),
    )
    return problem


def test_both_backends_and_the_test_fake_satisfy_the_backend_protocol(model):
    from cosyvoice_mac.pipeline.backend import Backend
    from cosyvoice_mac.preview.backend import PreviewVoice
    from tests.fakes.fake_pipeline import FakeCosyVoice

    assert isinstance(model, Backend)
    assert all(
        callable(getattr(cls, name, None))
        for cls in (PreviewVoice, FakeCosyVoice)
        for name in ("prepare_prompt", "prepare_streaming", "run", "to", "use_vocoder")
    )
    # Every member the engine reads (engine, precision, low_memory_choice, llm_weights, flow_prefix_builds,
    # stock_speaker, use_torch_engine, ...) is there, so the engine calls them without probing.
    preview, fake = PreviewVoice(), FakeCosyVoice("models/fake", torch.device("cpu"), None)
    assert isinstance(preview, Backend) and isinstance(fake, Backend)
    assert model.stock_speaker() is None and fake.stock_speaker() is None  # only the preview voice has its own
    assert preview.precision is None and preview.low_memory_choice is None and preview.flow_prefix_builds == 0
    assert model.precision is not None and model.flow_prefix_builds == model.flow_prefixes.builds
