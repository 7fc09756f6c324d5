"""Where the official ONNX frontends run: the provider choice, its fallbacks, and the provider the sidecar names.

No GPU or Mac here: onnxruntime's provider lists are simulated, and a provider asked for but not in this
onnxruntime is really asked for (onnxruntime drops it and runs on the CPU, which the session must report).
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime
import pytest
import torch

import cosyvoice_mac.frontend.onnx_session as onnx_session
from cosyvoice_mac.engine.job_output import save_result
from cosyvoice_mac.engine.jobs import Job, JobResult
from cosyvoice_mac.frontend.onnx_session import COREML, CPU, CUDA, PROVIDER_ENV, choose_providers
from cosyvoice_mac.frontend.speaker import SpeakerEncoder
from cosyvoice_mac.frontend.speech_tokenizer import SpeechTokenizer
from cosyvoice_mac.pipeline import CosyVoice
from cosyvoice_mac.pipeline.engines import engine_status
from tests.fakes.fake_pipeline import fake_request
from tests.fakes.onnx_models import make_tiny_model_dir, write_fake_campplus, write_fake_speech_tokenizer

ALL = [CUDA, COREML, CPU]


@pytest.mark.parametrize(
    ("available", "device", "platform", "expected"),
    [
        ([CUDA, CPU], "cuda", "linux", (CUDA, CPU)),  # onnxruntime-gpu beside a CUDA model
        ([CPU], "cuda", "linux", (CPU,)),  # the plain wheel: the CPU, saying why
        ([CUDA, CPU], "cpu", "linux", (CPU,)),  # the networks on the CPU: the frontends too
        ([COREML, CPU], "mps", "darwin", (COREML, CPU)),  # the standard macOS wheel
        ([COREML, CPU], "cpu", "darwin", (COREML, CPU)),  # MLX's models sit on torch's CPU device
        ([CPU], "mps", "darwin", (CPU,)),
        (ALL, "mps", "linux", (COREML, CPU)),
    ],
)
def test_auto_takes_the_accelerators_provider_when_onnxruntime_has_it(available, device, platform, expected):
    choice = choose_providers(available, device, "auto", platform=platform)
    assert choice.providers == expected and choice.providers[-1] == CPU
    if expected == (CPU,) and device in ("cuda", "mps"):
        assert "onnxruntime-gpu" in choice.reason or "macOS" in choice.reason  # what to install


def test_the_setting_overrides_the_choice_and_a_bad_one_is_refused_by_name(monkeypatch):
    assert choose_providers(ALL, "cuda", "cpu").providers == (CPU,)
    assert choose_providers(ALL, "cpu", "cuda", platform="linux").providers == (CUDA, CPU)
    assert choose_providers([CPU], "cpu", "coreml").providers == (CPU,)
    monkeypatch.setenv(PROVIDER_ENV, "CPU")
    assert choose_providers(ALL, "cuda").providers == (CPU,)  # read from the environment, any case
    with pytest.raises(ValueError, match=f"{PROVIDER_ENV}='tensorrt'"):
        choose_providers(ALL, "cuda", "tensorrt")


@pytest.fixture
def onnx_files(tmp_path):
    return (
        write_fake_speech_tokenizer(tmp_path / "speech_tokenizer_v3.onnx", vocab_size=512),
        write_fake_campplus(tmp_path / "campplus.onnx"),
    )


def _prompt16k() -> torch.Tensor:
    t = torch.arange(16000 * 2) / 16000
    return (0.3 * torch.sin(2 * torch.pi * 150 * t)).reshape(1, -1)


def test_a_provider_onnxruntime_cannot_load_leaves_a_cpu_session_that_says_so(onnx_files, monkeypatch):
    """This wheel has no CUDA provider: asked for anyway, onnxruntime drops it; the session must not claim it."""
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: [CUDA, CPU])
    tokenizer = SpeechTokenizer(onnx_files[0], vocab_size=512, device_type="cuda")
    assert tokenizer.provider == CPU and "did not load" in tokenizer.provider_reason
    assert tokenizer.tokens(_prompt16k()).shape == (1, 50)


def test_the_cuda_libraries_are_loaded_once_before_the_first_cuda_session_and_a_loader_error_only_logs(
    onnx_files, monkeypatch, caplog
):
    """onnxruntime-gpu finds CUDA and cuDNN in the nvidia pip packages only through ``preload_dlls``; a CPU session
    never asks for them, and a loader that fails must still leave the CPU fallback."""
    calls: list[str] = []

    def preload():
        calls.append("preload")
        print("libcudnn.so.9: cannot open shared object file")  # what onnxruntime prints goes to the log
        raise OSError("libcudnn.so.9 missing")

    monkeypatch.setattr(onnxruntime, "preload_dlls", preload, raising=False)
    onnx_session.preload_cuda_libraries.cache_clear()
    SpeechTokenizer(onnx_files[0], vocab_size=512, device_type="cpu")
    assert calls == []
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: [CUDA, CPU])
    tokenizer = SpeechTokenizer(onnx_files[0], vocab_size=512, device_type="cuda")
    SpeakerEncoder(onnx_files[1], device_type="cuda")
    assert calls == ["preload"] and tokenizer.provider == CPU
    assert "libcudnn.so.9" in caplog.text and "OSError" in caplog.text
    onnx_session.preload_cuda_libraries.cache_clear()


def test_a_session_that_fails_on_the_accelerator_is_made_again_on_the_cpu(onnx_files, monkeypatch):
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: [COREML, CPU])
    real = onnxruntime.InferenceSession
    asked: list[list[str]] = []

    def session(model, sess_options=None, providers=None):
        asked.append(providers)
        if COREML in providers:
            raise RuntimeError("CoreML: unsupported operator")
        return real(model, sess_options=sess_options, providers=providers)

    monkeypatch.setattr(onnxruntime, "InferenceSession", session)
    encoder = SpeakerEncoder(onnx_files[1], device_type="mps")
    assert asked == [[COREML, CPU], [CPU]]
    assert encoder.provider == CPU and "CoreML: unsupported operator" in encoder.provider_reason
    assert encoder.embedding(_prompt16k()).shape == (1, 192)


def test_a_broken_file_is_still_refused_by_name(tmp_path):
    broken = tmp_path / "campplus.onnx"
    broken.write_bytes(b"not an onnx model")
    with pytest.raises(Exception, match="cannot load speaker encoder model"):
        SpeakerEncoder(broken, device_type="cuda")


def test_the_status_and_the_sidecar_name_each_frontends_provider(tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_session, "FOR_DEVICE", {})  # whatever this machine is: the CPU provider
    model = CosyVoice.from_pretrained(make_tiny_model_dir("cosyvoice3", tmp_path / "m"), device="cpu")
    status = engine_status(model)
    assert status["frontend_providers"] == {"speech_tokenizer": CPU, "speaker_encoder": CPU}
    request = fake_request("Hello.")
    result = JobResult("j1", 24000, 1.0, "Hello.", "zero_shot", 0, 1.0, model.model_id, "cpu", audio=np.zeros(24000))
    save_result(tmp_path / "out", Job(request, job_id="j1"), result, model, {})
    sidecar = json.loads(open(result.sidecar_path, encoding="utf-8").read())
    assert sidecar["frontend_providers"] == {"speech_tokenizer": CPU, "speaker_encoder": CPU}
