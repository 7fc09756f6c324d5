"""The low-memory mode (what an 8 GB Mac gets) holds one copy of each weight, measured through the kernel.

A model folder is loaded memory-mapped. Every weight the loader copies (fused q/k/v and gate/up, 16-bit
storage) must hand its checkpoint pages back, or the process holds both the file's pages and the copy
(fused projections alone are 0.94 GB of the full-size LLM); the text table (0.55 GB) is not copied at
all and stays file pages that only the rows a sentence reads make resident; the ONNX sessions exist
only while a new voice is encoded. Checked on a medium LLM (hidden 128, 4 layers, the real 151936-row
text table) through ``/proc/self/smaps`` (Linux). The full-size figure: ``bench/low_memory_rss.py``.
"""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path

import pytest
import torch

from cosyvoice_mac.pipeline import CosyVoice
from cosyvoice_mac.pipeline.loading import HostTextEmbedding
from tests.fakes.random_folders import write_random_weight_folder

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads the kernel's page accounting in /proc")

WIDTH = 128
QWEN = {
    "hidden_size": WIDTH,
    "intermediate_size": 2048,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
PROMPT_TEXT = "Hello there, this is a short prompt for testing."
FUSED = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_random_weight_folder(
        "cosyvoice3",
        tmp_path_factory.mktemp("medium") / "Fun-CosyVoice3-medium",
        yaml_values={"llm_input_size": WIDTH, "llm_output_size": WIDTH},
        qwen=QWEN,
    )


def mapped_file(path: Path) -> dict:
    """This process's mappings of ``path``: {"rss": resident bytes, "ranges": [(start, end), ...]}."""
    found = {"rss": 0, "ranges": []}
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5 and not fields[0].endswith(":"):
            inside = len(fields) >= 6 and fields[5] == str(path)
            if inside:
                start, end = (int(value, 16) for value in fields[0].split("-"))
                found["ranges"].append((start, end))
        elif inside and fields[0] == "Rss:":
            found["rss"] += int(fields[1]) * 1024
    return found


def fused_bytes(folder: Path) -> int:
    state = torch.load(folder / "llm.pt", weights_only=True, mmap=True)
    return sum(tensor.nbytes for key, tensor in state.items() if any(f".{name}." in key for name in FUSED))


def test_a_low_memory_load_keeps_no_checkpoint_pages_next_to_their_copies(folder):
    copied = fused_bytes(folder)
    model = CosyVoice.from_pretrained(folder, device="cpu", low_memory=True)
    assert model.low_memory
    llm_pages = mapped_file(folder / "llm.pt")
    assert llm_pages["ranges"], "the text table should keep llm.pt mapped"
    # Without handing back the fused projections' pages, all of them (8.9 MB here) stay resident.
    assert llm_pages["rss"] < 0.1 * copied, (llm_pages["rss"], copied)
    flow_pages = mapped_file(folder / "flow.pt")  # flow matrices are stored in fp16 in this mode: copies too
    flow_bytes = (folder / "flow.pt").stat().st_size
    assert flow_pages["rss"] < 0.5 * flow_bytes, (flow_pages["rss"], flow_bytes)
    del model


def test_the_text_table_is_the_checkpoints_memory_mapped_tensor_and_a_sentence_reads_only_its_rows(folder, make_speech):
    model = CosyVoice.from_pretrained(folder, device="cpu", low_memory=True)
    table = model.networks.llm.backbone.embed_tokens
    assert isinstance(table, HostTextEmbedding) and table.weight.dtype == torch.float32
    mapping = mapped_file(folder / "llm.pt")
    address = table.weight.data_ptr()
    assert any(start <= address < end for start, end in mapping["ranges"]), "the table was copied"
    official = torch.load(folder / "llm.pt", weights_only=True)["llm.model.model.embed_tokens.weight"]
    ids = torch.tensor([[1, 5, 151646]])
    torch.testing.assert_close(table(ids), official[ids], rtol=0, atol=0)
    speaker = model.prepare_prompt(make_speech(PROMPT_TEXT, seconds=3.0), transcript=PROMPT_TEXT)
    results = list(model.synthesize("Hello world.", speaker=speaker, seed=1))
    assert results and results[-1].audio.size > 0
    table_bytes = table.weight.nbytes  # 78 MB here, 545 MB at full size
    assert mapped_file(folder / "llm.pt")["rss"] < 0.05 * table_bytes


def test_in_low_memory_mode_the_onnx_sessions_are_freed_after_each_new_voice(folder, make_speech):
    model = CosyVoice.from_pretrained(folder, device="cpu", low_memory=True)
    encoder = model.prompt_encoder
    sessions = []
    for on_demand in (encoder.speech_tokenizer, encoder.speaker_encoder):
        factory = on_demand._factory

        def build(factory=factory):
            built = factory()
            sessions.append(weakref.ref(built._session))
            return built

        on_demand._factory = build
    for seconds in (3.0, 4.0):  # two new voices: each loads both sessions and frees them again
        model.prepare_prompt(make_speech(PROMPT_TEXT, seconds=seconds), transcript=PROMPT_TEXT)
        gc.collect()
        assert len(sessions) in (2, 4) and all(session() is None for session in sessions), "a session is still held"
    assert len(sessions) == 4
