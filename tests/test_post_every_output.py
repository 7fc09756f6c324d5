"""Post-processing (trim, loudness) for every output, off by default (issue 21): the request contract's rules,
the worker applying them to each job before saving (what the page's Generate runs), the sidecar saying what
was done, and ``synth``. All on the preview voice's real speech; the API's side is ``tests/api/``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile

from cosyvoice_mac.errors import RequestError
from cosyvoice_mac.request import PostSettings, Request, Voice
from cosyvoice_mac.sound.post import TRIM_KEEP_S, loudness
from tests.fakes.fake_pipeline import preview_worker_config

TEXT = "Silence is trimmed and loudness is set for every output."
RATE = 24000
SILENCE_DB = -40.0  # a sample this far below the clip's peak is silence, for the measurements here
# Trim cuts at 512-sample frames of RMS (librosa) and keeps 20 ms: what is left at an edge, measured per sample.
TRIMMED_EDGE_S = TRIM_KEEP_S + 0.03


def edge_silence_s(wave: np.ndarray, rate: int = RATE) -> tuple[float, float]:
    """Seconds of silence before the first and after the last sample above SILENCE_DB of the peak."""
    loud = np.flatnonzero(np.abs(wave) > np.max(np.abs(wave)) * 10 ** (SILENCE_DB / 20))
    return loud[0] / rate, (wave.size - 1 - loud[-1]) / rate


def saved_pcm(result) -> np.ndarray:
    return soundfile.read(result.output_path, dtype="int16")[0]


def as_pcm(wave: np.ndarray) -> np.ndarray:
    """What the output writer stores for float samples (sound.wav.wav_bytes)."""
    return (np.clip(wave, -1.0, 1.0) * 32767.0).round().astype(np.int16)


def sidecar(result) -> dict:
    return json.loads(Path(result.sidecar_path).read_text())


# -- the contract ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("settings", "field", "words"),
    [
        ({"loudness_lufs": 0.0}, "loudness_lufs", "-40 to -5 LUFS (got 0)"),
        ({"loudness_lufs": -41}, "loudness_lufs", "-40 to -5 LUFS (got -41)"),
        ({"loudness_lufs": float("nan")}, "loudness_lufs", "a number of LUFS"),
        ({"loudness_lufs": "-16"}, "loudness_lufs", "a number of LUFS"),
        ({"loudness_lufs": True}, "loudness_lufs", "a number of LUFS"),
        ({"trim": "yes"}, "trim", "true or false"),
    ],
)
def test_bad_post_settings_are_refused_naming_the_field(settings, field, words):
    with pytest.raises(RequestError, match=re.escape(words)) as refused:
        PostSettings(**settings)
    assert refused.value.field == field


def test_post_processing_is_off_by_default_and_travels_in_the_request(make_speech):
    voice = Voice.recording(make_speech("A prompt voice."))
    assert Request.build("Hi.", voice).post == PostSettings() and not PostSettings().active
    asked = Request.build("Hi.", voice, post=PostSettings(trim=True, loudness_lufs=-23))
    assert asked.post.active and asked.post.as_dict() == {"trim": True, "loudness_lufs": -23}
    with pytest.raises(RequestError) as refused:
        Request.build("Hi.", voice, post={"trim": True})
    assert refused.value.field == "post"
    for edge in (-40.0, -5.0):
        assert PostSettings(loudness_lufs=edge).loudness_lufs == edge


def test_the_page_refuses_a_bad_target_with_a_message_naming_it(make_speech):
    from cosyvoice_mac.webui.generation import Generation

    upload = str(make_speech("A prompt voice for the page.", seconds=4.0))
    page = Generation(host=None, history=None)  # building a request needs neither
    request, problem = page.build_request(
        "en", upload, None, "", "Hello.", "cross_lingual", "", 1, 1.0, False, (True, True, -20.0)
    )
    assert problem is None and request.post == PostSettings(trim=True, loudness_lufs=-20.0)
    request, problem = page.build_request(
        "en", upload, None, "", "Hello.", "cross_lingual", "", 1, 1.0, False, (False, True, 3.0)
    )
    where, key, values = problem
    assert request is None and where == "status" and "loudness target must be -40 to -5 LUFS" in values["message"]
    request, _ = page.build_request("en", upload, None, "", "Hello.", "cross_lingual", "", 1, 1.0, False, (1, 0, -9))
    assert request.post == PostSettings(trim=True)  # normalise off: the slider's value is not used


# -- the worker: what every engine job (page, API, Gradio API) gets ----------------------------------------------
@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """The worker's runtime in this process on the preview voice; ``runtime.raw`` collects what the pipeline
    made for the last job (before any post-processing), ``runtime.sent`` its events."""
    from cosyvoice_mac.engine.runtime import WorkerRuntime

    sent: list = []
    config = preview_worker_config(tmp_path_factory.mktemp("post-runtime"), warmup_text="Hi.")
    worker = WorkerRuntime(config, sent.append)
    worker.load()
    worker.sent, worker.raw = sent, []
    made = worker.pipeline.run

    def recorded(request, speaker, should_stop=None, style_speakers=None):
        for piece in made(request, speaker, should_stop, style_speakers):
            worker.raw.append(piece.audio)
            yield piece

    worker.pipeline.run = recorded
    return worker


@pytest.fixture(scope="module")
def prompt(make_speech) -> Voice:
    return Voice.recording(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))


def _run(runtime, request: Request):
    """(result, the pipeline's own audio for it, the streamed chunks)."""
    from cosyvoice_mac.engine.jobs import Job

    runtime.sent.clear()
    runtime.raw.clear()
    runtime.run(Job(request, interface="page"), should_stop=lambda: False)
    terminal = runtime.sent[-1]
    assert terminal.kind == "done", terminal
    chunks = [event.audio for event in runtime.sent if event.kind == "progress" and event.audio is not None]
    return terminal.result, np.concatenate(runtime.raw), chunks


def test_off_by_default_the_saved_audio_is_the_pipeline_s_bit_for_bit(runtime, prompt):
    result, raw, _ = _run(runtime, Request.build(TEXT, prompt, seed=11))
    assert np.array_equal(saved_pcm(result), as_pcm(raw))
    assert sidecar(result)["post"] == {"trim": False, "loudness_lufs": None, "notes": []} == result.post


def test_trim_cuts_only_the_silent_edges_and_the_sidecar_says_how_much(runtime, prompt):
    result, raw, _ = _run(runtime, Request.build(TEXT, prompt, seed=12, post=PostSettings(trim=True)))
    saved, facts = saved_pcm(result), sidecar(result)
    start = round(facts["post"]["trimmed_start_ms"] * RATE / 1000)
    end = raw.size - round(facts["post"]["trimmed_end_ms"] * RATE / 1000)
    assert np.array_equal(saved, as_pcm(raw[start:end]))  # the speech itself is untouched
    assert saved.size == end - start and facts["duration_s"] == pytest.approx(saved.size / RATE, abs=1e-3)
    lead, tail = edge_silence_s(raw)
    left_lead, left_tail = edge_silence_s(saved.astype(np.float32))
    assert tail > TRIMMED_EDGE_S + 0.1, tail  # the preview ends in silence (it starts within a few ms of speech)
    assert left_lead <= max(lead, TRIMMED_EDGE_S) and left_tail <= TRIMMED_EDGE_S, (left_lead, left_tail)
    assert facts["post"]["trimmed_end_ms"] >= 1000 * (tail - TRIMMED_EDGE_S)
    assert "loudness_lufs" in facts["post"] and "target_lufs" not in facts["post"]
    assert any("trimmed" in note for note in facts["notes"]) and facts["post"]["notes"] == result.post["notes"]


@pytest.mark.parametrize("target", [-30.0, -36.0])  # the preview speaks at about -25 LUFS, peaks at -0.5 dBFS
def test_loudness_lands_within_half_a_unit_of_the_target_and_is_recorded(runtime, prompt, target):
    request = Request.build(TEXT, prompt, seed=13, post=PostSettings(loudness_lufs=target))
    result, raw, _ = _run(runtime, request)
    heard = loudness(result.samples(), RATE)
    post = sidecar(result)["post"]
    assert abs(heard - target) < 0.5, heard
    assert post["target_lufs"] == target and not post["peak_limited"] and post["output_lufs"] == target
    assert post["measured_lufs"] == pytest.approx(loudness(raw, RATE), abs=0.01)
    assert "trimmed_start_ms" not in post and result.samples().size == raw.size


def test_a_target_that_would_clip_is_held_at_minus_one_dbfs_and_the_note_says_so(runtime, prompt):
    result, _, _ = _run(runtime, Request.build(TEXT, prompt, seed=14, post=PostSettings(trim=True, loudness_lufs=-5)))
    post, samples = sidecar(result)["post"], result.samples()
    assert post["peak_limited"] and post["output_lufs"] < -5.0
    assert np.max(np.abs(samples)) == pytest.approx(10 ** (-1 / 20), abs=2e-4)
    assert abs(loudness(samples, RATE) - post["output_lufs"]) < 0.5
    assert any("so it does not clip" in note for note in result.notes)


def test_a_streamed_job_plays_raw_chunks_and_saves_the_processed_file_saying_so(runtime, prompt):
    request = Request.build(TEXT, prompt, seed=15, stream=True, post=PostSettings(trim=True, loudness_lufs=-30))
    result, raw, chunks = _run(runtime, request)
    assert chunks and np.array_equal(np.concatenate(chunks), raw)  # what played is the model's own audio
    assert abs(loudness(result.samples(), RATE) + 30) < 0.5 and result.samples().size < raw.size
    assert any("streamed audio played as it was made" in note for note in sidecar(result)["post"]["notes"])


# -- the page's Generate, through its wiring, the callbacks and the engine ------------------------------------------
def _press(generate, upload, *post):
    """Generate's last update for these inputs, sent as the page sends them (the panel's values last)."""
    from cosyvoice_mac.webui.state import Session

    inputs = ("en", upload, "", "", TEXT, "cross_lingual", "", 21, 1.0, False, Session())
    return list(generate(*inputs, SimpleNamespace(session_hash="post"), *post))[-1]


def test_generate_with_the_page_s_controls_saves_post_processed_audio(tmp_path, make_speech):
    from cosyvoice_mac.engine.host import HostConfig, ModelHost
    from cosyvoice_mac.webui.page import build_app

    host = ModelHost(
        HostConfig(
            models_dir=tmp_path / "none",
            outputs_dir=tmp_path / "outputs",
            cache_dir=tmp_path / "cache",
            torch_threads=1,
            preview=True,
        )
    )
    try:
        page = build_app(host=host)
        generate = next(fn for fn in page.fns.values() if getattr(fn.fn, "__name__", "") == "generate")
        ids = [getattr(block, "elem_id", None) for block in generate.inputs]
        post = ids.index("cv-post-trim")  # after the session, before the sampling controls
        assert ids[post : post + 3] == ["cv-post-trim", "cv-post-level", "cv-post-loudness"]  # the panel is sent
        defaults = [block.value for block in generate.inputs[post : post + 3]]
        assert defaults[:2] == [False, False]  # off until the user turns it on
        assert host.start() is not None and host.engine.start(wait=True, timeout=180), host.status()
        upload = str(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))
        done = _press(generate.fn, upload, True, True, -30.0)
        refused = _press(generate.fn, upload, False, True, 1.0)
    finally:
        host.close()
    assert done.status.startswith("✅") and "LUFS" in done.status, done.status  # the notes say what was done
    samples = soundfile.read(done.result, dtype="float32")[0]
    facts = json.loads(Path(done.result).with_suffix(".json").read_text())
    assert abs(loudness(samples, RATE) + 30) < 0.5 and facts["post"]["target_lufs"] == -30.0
    lead, tail = edge_silence_s(samples)
    assert lead <= TRIMMED_EDGE_S and tail <= TRIMMED_EDGE_S and facts["post"]["trimmed_end_ms"] > 100
    assert facts["interface"] == "page"
    assert "loudness target must be -40 to -5 LUFS (got 1)" in refused.status
    assert len(list((tmp_path / "outputs").glob("*.wav"))) == 1  # the refused one made nothing


# -- synth ----------------------------------------------------------------------------------------------------------
def _synth(tmp_path, prompt_wav, name, *flags):
    from cosyvoice_mac.cli.main import main

    out = tmp_path / name
    code = main(
        ["synth", "--model", "preview", "--prompt-wav", str(prompt_wav), "--text", TEXT, "--seed", "5"]
        + ["--out", str(out), *flags]
    )
    return code, out


def test_synth_trims_and_normalises_when_asked_and_leaves_the_audio_alone_otherwise(tmp_path, make_speech, capsys):
    from cosyvoice_mac.sound.post import post_process

    prompt_wav = make_speech("This is the voice I would like you to copy, please.", seconds=4.0)
    code, plain = _synth(tmp_path, prompt_wav, "plain.wav")
    assert code == 0 and "post-processing" not in capsys.readouterr().err
    code, processed = _synth(tmp_path, prompt_wav, "processed.wav", "--trim", "--loudness", "-30")
    assert code == 0 and "loudness" in capsys.readouterr().err
    raw = soundfile.read(plain, dtype="float32")[0]
    made = soundfile.read(processed, dtype="float32")[0]
    assert abs(loudness(made, RATE) + 30) < 0.5
    lead, tail = edge_silence_s(made)
    assert lead <= TRIMMED_EDGE_S and tail <= TRIMMED_EDGE_S
    expected, _ = post_process(raw, RATE, PostSettings(trim=True, loudness_lufs=-30.0))  # same seed, same speech
    assert made.size == expected.size and np.allclose(made, expected, atol=2e-3)


def test_synth_refuses_a_bad_target_before_loading_a_model(tmp_path, make_speech, capsys):
    code, out = _synth(tmp_path, make_speech("A prompt voice."), "never.wav", "--loudness", "0")
    assert code == 2 and "loudness target must be -40 to -5 LUFS" in capsys.readouterr().err and not out.exists()
