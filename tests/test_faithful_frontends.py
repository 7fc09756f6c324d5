"""The bench's faithful frontends: the released structures' sizes, and the app's frontend code running their graphs.

Full size is checked on the meta device (no memory, no time); the graphs are exported at small sizes of the same
structure and run through ``SpeechTokenizer`` / ``SpeakerEncoder`` / ``PromptEncoder`` as the released files are.
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime
import pytest
import torch

import cosyvoice_mac.bench.faithful_frontends as faithful
from cosyvoice_mac.bench import faithful_campplus, faithful_s3
from cosyvoice_mac.bench.faithful_campplus import CamPlusPlus, CamShape
from cosyvoice_mac.bench.faithful_s3 import S3Shape, S3Tokenizer, parameter_count
from cosyvoice_mac.frontend.features import whisper_log_mel
from cosyvoice_mac.frontend.speaker import RandomSpeakerEncoder, SpeakerEncoder, normalised_fbank
from cosyvoice_mac.frontend.speech_tokenizer import RandomSpeechTokenizer, SpeechTokenizer
from cosyvoice_mac.pipeline.fullsize import official_config
from cosyvoice_mac.pipeline.speaker import PromptEncoder

TINY_S3 = S3Shape(layers=2, width=64, heads=4)
TINY_CAM = CamShape(head_channels=8, tdnn_channels=16, growth=8, bottleneck=16, block_layers=(2, 2, 2))
# The packages' own modules hold exactly these counts (s3tokenizer 0.3.0's S3TokenizerV2 / V3, 3D-Speaker's
# CAMPPlus(feat_dim=80, embedding_size=192)), so the tolerance is none: one bias vector more or less (0.006 % of
# the tokenizer) is already another structure.
PARAMETER_TOLERANCE = 0


def _s3_count(layers: int, width: int = 1280, mels: int = 128, taps: int = 31) -> int:
    """The S3 tokenizer's parameters, counted by hand from the package's layers (key projection without bias)."""
    stem = (mels * 3 * width + width) + (width * 3 * width + width)
    attention = 4 * width * width + 3 * width + width * taps
    block = attention + 2 * 2 * width + (width * 4 * width + 4 * width) + (4 * width * width + width)
    return stem + layers * block + (width * 8 + 8)


@pytest.mark.parametrize("version", ["cosyvoice2", "cosyvoice3"])
def test_the_tokenizers_have_the_released_parameter_counts(version):
    with torch.device("meta"):
        model = S3Tokenizer(faithful_s3.S3_SHAPES[version])
    released = faithful_s3.RELEASED_PARAMETERS[version]
    assert released == _s3_count(faithful_s3.S3_SHAPES[version].layers)
    assert abs(parameter_count(model) - released) <= PARAMETER_TOLERANCE * released
    assert model.shape.codes == int(official_config(version)["llm"]["speech_token_size"])  # 6561 tokens


def test_campplus_has_the_released_parameter_count():
    with torch.device("meta"):
        model = CamPlusPlus()
    released = faithful_campplus.RELEASED_PARAMETERS
    assert abs(parameter_count(model) - released) <= PARAMETER_TOLERANCE * released
    # ~27 MB of float32 weights: the released campplus.onnx is 28.3 MB
    assert 0.95 < 4 * released / 28_303_423 < 1.0


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("faithful")
    faithful.export_speech_tokenizer(folder / "speech_tokenizer_v3.onnx", TINY_S3, seed=3)
    faithful.export_campplus(folder / "campplus.onnx", TINY_CAM, seed=3)
    return folder


def _wave(seconds: float, seed: int = 0) -> torch.Tensor:
    return faithful.synthetic_wave(seconds, seed)


def test_the_tokenizer_graph_has_the_released_interface_and_runs_in_the_app(tiny_folder):
    session = onnxruntime.InferenceSession(str(tiny_folder / "speech_tokenizer_v3.onnx"))
    assert [(i.name, i.type) for i in session.get_inputs()] == [
        ("feats", "tensor(float)"),
        ("feats_length", "tensor(int32)"),
    ]
    assert [(o.name, o.type) for o in session.get_outputs()] == [("indices", "tensor(int32)")]
    tokenizer = SpeechTokenizer(tiny_folder / "speech_tokenizer_v3.onnx", vocab_size=6561)
    with torch.random.fork_rng():
        torch.manual_seed(3)
        module = S3Tokenizer(TINY_S3).eval()
    for seconds in (0.7, 2.3):  # time is a dynamic axis
        wave = _wave(seconds)
        tokens = tokenizer.tokens(wave)
        mel = whisper_log_mel(wave)
        assert tokens.dtype == torch.int64 and tokens.shape == (1, -(-mel.shape[2] // 4))
        assert 0 <= int(tokens.min()) and int(tokens.max()) < 6561
        assert len(set(tokens[0].tolist())) > 1  # a function of the audio, not one code
        with torch.no_grad():
            expected = module(mel, torch.tensor([mel.shape[2]], dtype=torch.int32))
        assert torch.equal(tokens, expected.long())  # the graph computes what the module does


def test_the_length_input_masks_the_padding(tiny_folder):
    """As in the package: frames past ``feats_length`` change nothing before it (the padding is masked)."""
    session = onnxruntime.InferenceSession(str(tiny_folder / "speech_tokenizer_v3.onnx"))
    mel = whisper_log_mel(_wave(1.0)).numpy()
    padded = np.concatenate([mel, np.random.default_rng(1).standard_normal((1, 128, 40)).astype(np.float32)], axis=2)
    length = np.array([mel.shape[2]], dtype=np.int32)
    alone = session.run(None, {"feats": mel, "feats_length": length})[0]
    with_padding = session.run(None, {"feats": padded, "feats_length": length})[0]
    assert np.array_equal(with_padding[:, : alone.shape[1]], alone)


def test_the_campplus_graph_has_the_released_interface_and_runs_in_the_app(tiny_folder):
    session = onnxruntime.InferenceSession(str(tiny_folder / "campplus.onnx"))
    assert [(i.name, i.type) for i in session.get_inputs()] == [("input", "tensor(float)")]
    encoder = SpeakerEncoder(tiny_folder / "campplus.onnx")
    with torch.random.fork_rng():
        torch.manual_seed(3)
        module = CamPlusPlus(TINY_CAM).eval()
    for seconds in (1.0, 3.0):  # 3 s: two segments of the context mask, the second one partial
        wave = _wave(seconds)
        embedding = encoder.embedding(wave)
        assert embedding.dtype == torch.float32 and embedding.shape == (1, 192)
        with torch.no_grad():
            expected = module(normalised_fbank(wave).unsqueeze(0))
        torch.testing.assert_close(embedding, expected, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(encoder.embedding(_wave(3.0, seed=1)), encoder.embedding(_wave(1.0, seed=2)))


class _RandomWeightModel:
    """What ``use_faithful_frontends`` reads of a ``CosyVoice``: its version, config, memory mode, device, encoder."""

    def __init__(self, low_memory: bool):
        self.version, self.config = "cosyvoice3", official_config("cosyvoice3")
        self.low_memory, self.device = low_memory, torch.device("cpu")
        self.prompt_encoder = PromptEncoder(RandomSpeechTokenizer(), RandomSpeakerEncoder(), fmax=None, model_id="x")


@pytest.mark.parametrize("low_memory", [False, True])
def test_a_model_given_the_faithful_frontends_encodes_prompts_through_them(tiny_folder, low_memory):
    model = _RandomWeightModel(low_memory)
    faithful.use_faithful_frontends(model, tiny_folder)
    encoder = model.prompt_encoder
    assert encoder.providers() == (
        {"speech_tokenizer": None, "speaker_encoder": None}
        if low_memory
        else {
            "speech_tokenizer": "CPUExecutionProvider",
            "speaker_encoder": "CPUExecutionProvider",
        }
    )
    wave = _wave(2.0)
    direct = SpeechTokenizer(tiny_folder / "speech_tokenizer_v3.onnx").tokens(wave)
    assert torch.equal(encoder.speech_tokens(wave), direct)  # the one path prompts and conversions take
    prompt = encoder.encode(wave[0].numpy(), sample_rate=16000)  # decoded (levels, silence) before encoding
    stand_in = PromptEncoder(RandomSpeechTokenizer(), RandomSpeakerEncoder(), fmax=None, model_id="x")
    made_by_stand_ins = stand_in.encode(wave[0].numpy(), sample_rate=16000)
    assert prompt.speech_tokens.shape == made_by_stand_ins.speech_tokens.shape
    assert not torch.equal(prompt.speech_tokens, made_by_stand_ins.speech_tokens)
    assert prompt.embedding.shape == (1, 192) and not torch.allclose(prompt.embedding, made_by_stand_ins.embedding)
    assert encoder.speech_tokenizer.loaded is not low_memory  # low memory: loaded per call, as a folder's are


def test_the_folder_is_built_once_and_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(tmp_path))
    builds = []

    def tiny_build(version, folder, seed=0):
        builds.append(version)
        faithful.export_campplus(folder / "campplus.onnx", TINY_CAM)
        return {"version": version, "campplus.onnx": {"parameters": 1}}

    monkeypatch.setattr(faithful, "write_faithful_frontends", tiny_build)
    first, record = faithful.faithful_frontends_folder("cosyvoice2")
    again, record_again = faithful.faithful_frontends_folder("cosyvoice2")
    assert builds == ["cosyvoice2"] and first == again and record == record_again
    assert (first / "campplus.onnx").is_file() and not list(tmp_path.glob("bench/*.partial-*"))
    assert json.loads((first / faithful.COMPLETE).read_text())["version"] == "cosyvoice2"


def test_a_build_that_finishes_second_keeps_the_first_ones_files(tmp_path, monkeypatch):
    """Two processes building at once: the one that finishes second leaves the first one's folder (which may be in
    use) as it is and drops its own."""
    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(tmp_path))
    kept = tmp_path / "bench" / f"faithful-frontends-cosyvoice2-s{faithful.STRUCTURE}"

    def build_while_another_finishes(version, folder, seed=0):
        kept.mkdir(parents=True)
        (kept / faithful.COMPLETE).write_text(json.dumps({"version": version, "by": "the other process"}))
        (folder / "campplus.onnx").parent.mkdir(parents=True, exist_ok=True)
        (folder / "campplus.onnx").write_bytes(b"ours")
        return {"version": version, "by": "this process"}

    monkeypatch.setattr(faithful, "write_faithful_frontends", build_while_another_finishes)
    folder, record = faithful.faithful_frontends_folder("cosyvoice2")
    assert folder == kept and record["by"] == "the other process" and not (kept / "campplus.onnx").exists()
    assert not list(tmp_path.glob("bench/*.partial-*"))
