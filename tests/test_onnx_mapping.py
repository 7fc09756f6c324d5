"""ONNX weights memory-mapped from the official file: the same outputs, a graph of kilobytes, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cosyvoice_mac.checkpoint import CheckpointError
from cosyvoice_mac.frontend.onnx_mapping import OnnxStructureError, mapped_model_bytes
from cosyvoice_mac.frontend.speaker import SpeakerEncoder
from cosyvoice_mac.frontend.speech_tokenizer import SpeechTokenizer
from tests.fakes.onnx_models import write_fake_campplus, write_fake_speech_tokenizer
from tests.fakes.random_folders import add_ballast

BALLAST_BYTES = 40 * 2**20


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx")
    tokenizer = add_ballast(write_fake_speech_tokenizer(folder / "speech_tokenizer_v3.onnx"), BALLAST_BYTES)
    return tokenizer, write_fake_campplus(folder / "campplus.onnx")


def test_mapped_sessions_compute_what_embedded_ones_do_from_a_graph_of_kilobytes(models):
    tokenizer_path, campplus_path = models
    wave = torch.from_numpy(np.random.default_rng(3).standard_normal((1, 48000)).astype(np.float32) * 0.1)
    tokens = [SpeechTokenizer(tokenizer_path, map_weights=mapped).tokens(wave) for mapped in (False, True)]
    assert torch.equal(*tokens) and tokens[0].shape == (1, 75)
    embeddings = [SpeakerEncoder(campplus_path, map_weights=mapped).embedding(wave) for mapped in (False, True)]
    torch.testing.assert_close(*embeddings, rtol=0, atol=0)
    graph = mapped_model_bytes(tokenizer_path)
    assert len(graph) < 0.001 * tokenizer_path.stat().st_size  # the weights stay in the file
    assert tokenizer_path.name.encode() in graph


def test_a_file_that_is_not_an_onnx_model_is_refused_by_name(tmp_path, models):
    broken = tmp_path / "speech_tokenizer_v3.onnx"
    broken.write_bytes(models[0].read_bytes()[:5000])  # cut inside the first weight
    with pytest.raises(OnnxStructureError):
        mapped_model_bytes(broken)
    with pytest.raises(CheckpointError, match="speech_tokenizer_v3.onnx"):
        SpeechTokenizer(broken, map_weights=True)
    garbage = tmp_path / "campplus.onnx"
    garbage.write_bytes(b"\xff" * 64)
    with pytest.raises(CheckpointError, match="cannot load speaker encoder model"):
        SpeakerEncoder(garbage, map_weights=True)
