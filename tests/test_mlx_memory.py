"""MLX's memory on a small machine: limits from its RAM, the cache handed back after every sentence, and the
low-memory mode's storage (16-bit LLM read in 16 bits, the flow's DiT blocks in fp16, smaller vocoder windows).

The machine is an 8 GiB one as the device policy sees it (``cosyvoice_mac.bench.memory``'s simulation).
"""

from __future__ import annotations

import pytest

pytest.importorskip("mlx.core", reason="needs mlx (Linux: pip install 'mlx[cpu]')")

import mlx.core as mx  # noqa: E402
import torch  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

from cosyvoice_mac import device  # noqa: E402
from cosyvoice_mac.bench.memory import EIGHT_GIB, _MachineWithRam  # noqa: E402
from cosyvoice_mac.mlx import memory  # noqa: E402
from cosyvoice_mac.mlx.hift import LOW_MEMORY_CONV_WINDOW  # noqa: E402
from cosyvoice_mac.mlx.speech_lm import MlxSpeechLM  # noqa: E402
from cosyvoice_mac.pipeline import CosyVoice  # noqa: E402
from cosyvoice_mac.request import Request, Voice  # noqa: E402
from tests.fakes.onnx_models import make_tiny_model_dir  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_tiny_model_dir("cosyvoice3", tmp_path_factory.mktemp("tiny-v3") / "model")


@pytest.fixture
def eight_gib(monkeypatch, tmp_path):
    monkeypatch.setattr(device, "psutil", _MachineWithRam(EIGHT_GIB))
    monkeypatch.setenv("COSYVOICE_MLX_CACHE", str(tmp_path / "mlx-cache"))
    monkeypatch.delenv("COSYVOICE_MLX_LLM", raising=False)
    memory_before, cache_before = mx.get_memory_limit(), mx.set_cache_limit(0)
    mx.set_cache_limit(cache_before)
    yield
    mx.set_memory_limit(memory_before)
    mx.set_cache_limit(cache_before)


def test_limits_come_from_the_machine_and_the_low_memory_mode_stores_less(folder, eight_gib, monkeypatch):
    monkeypatch.setenv("COSYVOICE_MLX_LLM", "fp16")  # the gate's own pick: test_mlx_quantize.py
    model = CosyVoice.from_pretrained(folder, device="cpu", engine="mlx", low_memory=True)
    assert mx.get_memory_limit() == int(0.7 * EIGHT_GIB)  # before: MLX's default, past the RAM
    assert mx.set_cache_limit(memory.LOW_MEMORY_CACHE_BYTES) == memory.LOW_MEMORY_CACHE_BYTES
    limits = model.networks.memory_limits
    assert limits.ram_bytes == EIGHT_GIB and limits.cache_bytes == memory.LOW_MEMORY_CACHE_BYTES
    networks = model.networks
    assert networks.llm_precision == "fp16"
    assert {a.dtype for _, a in tree_flatten(networks.llm.parameters())} == {mx.float16}
    flow = dict(tree_flatten(networks.flow.mlx.parameters()))
    blocks = {name for name in flow if name.startswith("decoder.estimator.transformer_blocks.")}
    assert blocks and all(flow[name].dtype == mx.float16 for name in blocks)  # before: all float32
    assert all(flow[name].dtype == mx.float32 for name in set(flow) - blocks)  # the DiT computes in float32
    assert networks.hift.conv_limit == LOW_MEMORY_CONV_WINDOW


def test_a_16_bit_llm_is_read_in_16_bits(folder, eight_gib):
    from cosyvoice_mac.models.llm import Qwen2Config, SpeechLMConfig

    config = CosyVoice.from_pretrained(folder, device="cpu", engine="mlx").config
    qwen = Qwen2Config.from_json(folder / "CosyVoice-BlankEN" / "config.json")
    llm_config = SpeechLMConfig.from_yaml(config["llm"], qwen)
    fp32 = MlxSpeechLM.from_checkpoint(folder / "llm.pt", llm_config)
    fp32_bytes = sum(a.nbytes for _, a in tree_flatten(fp32.parameters()))
    del fp32
    mx.clear_cache()
    before = mx.get_active_memory()
    mx.reset_peak_memory()
    half = MlxSpeechLM.from_checkpoint(folder / "llm.pt", llm_config, dtype=mx.float16)
    assert {a.dtype for _, a in tree_flatten(half.parameters())} == {mx.float16}
    assert mx.get_peak_memory() - before < 0.75 * fp32_bytes  # never the fp32 copy whole beside the fp16 one


@pytest.mark.parametrize("stream", [False, True])
def test_the_cache_is_handed_back_after_every_sentence(folder, eight_gib, make_speech, monkeypatch, stream):
    model = CosyVoice.from_pretrained(folder, device="cpu", engine="mlx")
    prompt = str(make_speech("This is the voice I would like you to copy, please.", seconds=3.0))
    speaker = model.prepare_prompt(prompt, transcript="hello")
    model.normalizer.token_max_n, model.normalizer.token_min_n, model.normalizer.merge_len = 8, 4, 2  # 2 segments
    cleared: list[int] = []
    real = memory.mx.clear_cache
    monkeypatch.setattr(memory.mx, "clear_cache", lambda: (cleared.append(mx.get_cache_memory()), real())[1])
    text = "The first sentence is here. And this is the second one."
    request = Request.build(text, Voice.recording(prompt), stream=stream)
    results = list(model.run(request, speaker=speaker))
    sentences = {result.segment_index for result in results}
    assert len(sentences) == 2 and len(cleared) == 2  # before: only after a whole job, by the engine
    assert mx.get_cache_memory() == 0 and torch.isfinite(torch.as_tensor(results[-1].audio)).all()
