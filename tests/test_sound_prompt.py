"""One prompt reader and one sentence per prompt problem: the CLI, the API, the page and the worker read a
bad file the same way and say what is wrong with it in the same words."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch

from cosyvoice_mac.sound import read
from cosyvoice_mac.sound.problems import PROBLEMS, SENTENCES, AudioInputError, sentence
from cosyvoice_mac.sound.prompt_check import inspect_prompt

SENTENCE = "The quick brown fox jumps over the lazy dog."


def _bad_file(kind: str, tmp_path, make_speech):
    if kind == "not_audio":
        (path := tmp_path / "notes.wav").write_text("meeting notes\n")
    elif kind == "empty":
        (path := tmp_path / "nothing.wav").write_bytes(b"")
    elif kind == "no_samples":  # a WAV header and no frames: the page used to call it "not audio"
        soundfile.write(path := tmp_path / "header.wav", np.zeros(0, np.float32), 22050)
    elif kind == "invalid_samples":
        samples = np.full(22050 * 2, np.nan, np.float32)
        soundfile.write(path := tmp_path / "nan.wav", samples, 22050, subtype="FLOAT")
    elif kind == "silent":
        soundfile.write(path := tmp_path / "silent.wav", np.zeros(3 * 22050, np.float32), 22050)
    elif kind == "low_rate":
        path = make_speech(SENTENCE, seconds=3.0, sample_rate=8000)
    elif kind == "odd_rate":  # the page used to accept it and leave the refusal to the worker
        samples, _ = soundfile.read(make_speech(SENTENCE, seconds=3.0), dtype="float32")
        soundfile.write(path := tmp_path / "odd.wav", samples, 44101)
    return path


KINDS = ("not_audio", "empty", "no_samples", "invalid_samples", "silent", "low_rate", "odd_rate")


@pytest.mark.parametrize("kind", KINDS)
def test_the_cli_the_api_the_page_and_the_worker_say_the_same_sentence(kind, tmp_path, make_speech):
    from cosyvoice_mac.api.engine_link import EngineLink
    from cosyvoice_mac.api.errors import ApiError
    from cosyvoice_mac.cli.main import _check_prompt
    from cosyvoice_mac.errors import CosyVoiceError
    from cosyvoice_mac.frontend.prompt_audio import decode_prompt
    from cosyvoice_mac.webui.render import render_prompt_check

    path = _bad_file(kind, tmp_path, make_speech)
    check = inspect_prompt(path)
    assert check.problem == kind and path.name in check.sentence
    with pytest.raises(CosyVoiceError) as cli:
        _check_prompt(path)
    with pytest.raises(ApiError) as api:
        EngineLink(host=None).check_recording(str(path), "audio")
    with pytest.raises(AudioInputError) as worker:
        decode_prompt(path).at(16000)
    assert str(cli.value) == api.value.message == str(worker.value) == check.sentence
    assert api.value.code == f"audio_{kind}" and worker.value.problem == kind
    assert render_prompt_check("en", check) == "⚠️ " + check.sentence  # the page shows the same words


def test_the_page_strings_are_the_sentences_word_for_word():
    from cosyvoice_mac.webui.render import PROMPT_PROBLEM_KEYS
    from cosyvoice_mac.webui.strings import EN

    assert set(PROMPT_PROBLEM_KEYS) == set(PROBLEMS)
    for problem in PROBLEMS:
        assert EN[PROMPT_PROBLEM_KEYS[problem]] == "⚠️ " + SENTENCES[problem], problem


def test_long_and_short_prompts_are_said_alike_by_the_check_and_the_worker(make_speech, tmp_path):
    from cosyvoice_mac.frontend.prompt_audio import decode_prompt

    speech, rate = soundfile.read(make_speech(SENTENCE), dtype="float32")
    soundfile.write(short := tmp_path / "short.wav", speech[: int(0.5 * rate)], rate)
    for path in (short, make_speech(SENTENCE, seconds=35.0)):
        check = inspect_prompt(path)
        with pytest.raises(AudioInputError) as worker:
            decode_prompt(path).at(16000)
        assert worker.value.problem == check.problem
        said = {**check.details, "speech": worker.value.details["speech"]}  # each measures the speech itself
        assert str(worker.value) == sentence(check.problem, said)
        assert worker.value.details["limit"] == pytest.approx(check.details["limit"])


def test_one_reader_decodes_for_the_check_the_worker_the_parity_loader_and_the_transcriber(make_speech, monkeypatch):
    from cosyvoice_mac.engine.asr import load_for_asr
    from cosyvoice_mac.frontend.prompt import load_wav
    from cosyvoice_mac.frontend.prompt_audio import decode_prompt

    reads: list[str] = []
    real = read._read_with_soundfile
    monkeypatch.setattr(read, "_read_with_soundfile", lambda path: reads.append(path.name) or real(path))
    path = make_speech(SENTENCE, seconds=3.0)
    assert inspect_prompt(path).ok
    decoded = decode_prompt(path)
    loaded = load_wav(path, 16000)
    load_for_asr(path)
    assert reads == [path.name] * 4
    assert torch.equal(decoded.wave_16k, loaded)  # the parity loader reads what the worker reads
