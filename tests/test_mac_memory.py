"""What an 8 GB Mac gets: the low-memory mode by default, a bounded MPS allocator, the text-embedding
table in host memory, and the MPS cache emptied between sentences (each checked here on Linux)."""

from __future__ import annotations

import pytest
import torch

from cosyvoice_mac import device as device_policy
from cosyvoice_mac.device import DeviceError, low_memory_choice
from cosyvoice_mac.engine.job_output import low_memory_facts
from cosyvoice_mac.pipeline import CosyVoice, loading
from cosyvoice_mac.pipeline.loading import HostTextEmbedding
from cosyvoice_mac.webui.render import render_status
from tests.fakes.onnx_models import make_tiny_model_dir

GIB = 2**30
PROMPT_TEXT = "Hello there, this is a short prompt for testing."


@pytest.fixture(autouse=True)
def no_memory_override(monkeypatch):
    monkeypatch.delenv("COSYVOICE_LOW_MEMORY", raising=False)


def test_low_memory_is_automatic_at_12_gib_or_less_and_overridable_both_ways(monkeypatch):
    assert low_memory_choice(total_ram_bytes=8 * GIB) == device_policy.LowMemoryChoice(
        True, "auto: 8 GiB RAM <= 12 GiB"
    )
    assert low_memory_choice(total_ram_bytes=12 * GIB).enabled
    assert not low_memory_choice(total_ram_bytes=16 * GIB).enabled
    monkeypatch.setenv("COSYVOICE_LOW_MEMORY", "0")
    assert low_memory_choice(total_ram_bytes=8 * GIB) == device_policy.LowMemoryChoice(False, "COSYVOICE_LOW_MEMORY=0")
    monkeypatch.setenv("COSYVOICE_LOW_MEMORY", "on")
    assert low_memory_choice(total_ram_bytes=64 * GIB).enabled
    assert not low_memory_choice(False, total_ram_bytes=8 * GIB).enabled  # an argument wins over both
    monkeypatch.setenv("COSYVOICE_LOW_MEMORY", "maybe")
    with pytest.raises(DeviceError, match="COSYVOICE_LOW_MEMORY"):
        low_memory_choice()


@pytest.fixture
def eight_gb_model(monkeypatch, tmp_path):
    total = type("Memory", (), {"total": 8 * GIB})()
    monkeypatch.setattr(device_policy.psutil, "virtual_memory", lambda: total)
    return CosyVoice.from_pretrained(make_tiny_model_dir("cosyvoice3", tmp_path), device="cpu")


def test_an_8_gb_machine_loads_in_low_memory_mode_and_never_holds_both_onnx_sessions(eight_gb_model, make_speech):
    model = eight_gb_model
    assert model.low_memory and model.low_memory_choice.reason.startswith("auto: 8 GiB")
    encoder = model.prompt_encoder
    tokenizer, speaker = encoder.speech_tokenizer, encoder.speaker_encoder
    assert not tokenizer.loaded and not speaker.loaded  # nothing resident until a new prompt
    both_loaded = []
    for session in (tokenizer, speaker):
        factory = session._factory

        def build(factory=factory):
            both_loaded.append(tokenizer.loaded or speaker.loaded)  # is the other one still resident?
            return factory()

        session._factory = build
    model.prepare_prompt(make_speech(PROMPT_TEXT, seconds=3.0), transcript=PROMPT_TEXT)
    assert both_loaded == [False, False] and not tokenizer.loaded and not speaker.loaded
    # The status panel and every sidecar carry the choice and its reason.
    status = {"state": "ready", "low_memory": low_memory_facts(model)}
    assert "Low-memory mode:** on (auto: 8 GiB RAM &#60;= 12 GiB" in render_status("en", status)  # escaped
    assert "低内存模式" in render_status("zh", status)


def test_the_mps_allocator_is_capped_unless_the_user_set_torchs_own_variable(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.mps, "set_per_process_memory_fraction", calls.append)
    monkeypatch.delenv("PYTORCH_MPS_HIGH_WATERMARK_RATIO", raising=False)
    assert device_policy.limit_mps_memory(torch.device("cpu")) is None and calls == []
    assert device_policy.limit_mps_memory(torch.device("mps")) == 1.0 and calls == [1.0]
    monkeypatch.setenv("PYTORCH_MPS_HIGH_WATERMARK_RATIO", "1.4")
    assert device_policy.limit_mps_memory(torch.device("mps")) is None and calls == [1.0]


@pytest.mark.parametrize("stream", [False, True])
def test_the_mps_cache_is_emptied_after_every_sentence(monkeypatch, tmp_path, make_speech, stream):
    model = CosyVoice.from_pretrained(make_tiny_model_dir("cosyvoice2", tmp_path), device="cpu")
    speaker = model.prepare_prompt(make_speech(PROMPT_TEXT, seconds=3.0), transcript=PROMPT_TEXT)
    emptied = []
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: emptied.append(1))
    model.device = torch.device("mps")  # only the sentence policy reads it; the networks stay on the CPU
    results = list(model.synthesize("Hello world.", speaker=speaker, seed=1, stream=stream))
    assert len(emptied) == results[-1].segment_count >= 1


def test_the_text_embedding_table_stays_in_host_memory_where_the_policy_says(monkeypatch, tmp_path):
    folder = make_tiny_model_dir("cosyvoice3", tmp_path)
    plain = CosyVoice.from_pretrained(folder, device="cpu").networks.llm
    monkeypatch.setattr(loading, "text_embedding_on_host", lambda device: True)  # what MPS gets
    hosted = CosyVoice.from_pretrained(folder, device="cpu").networks.llm
    table = hosted.backbone.embed_tokens
    assert isinstance(table, HostTextEmbedding)
    ids = torch.tensor([[1, 5, 151646]])
    torch.testing.assert_close(table(ids), plain.backbone.embed_tokens(ids), rtol=0, atol=0)
    assert set(hosted.state_dict()) == set(plain.state_dict())
    hosted.to("meta")  # "the device": everything moves but the table
    assert table.weight.device.type == "cpu" and table.anchor.device.type == "meta"
    assert next(hosted.speech_embedding.parameters()).device.type == "meta"
    assert table(ids).device.type == "meta"
