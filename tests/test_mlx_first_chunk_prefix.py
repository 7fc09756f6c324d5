"""A new voice's first streamed chunk records its flow prefix on the way on MLX too
(``MlxFlow.first_chunk_recording_prefix``, CosyVoice3's DiT and CosyVoice2's U-Net): the recorded prefix equals a
built one, the first chunk equals the uncached computation, later chunks through either prefix are the same, and
the streaming pipeline on MLX records a new voice's prefix instead of building it first. MLX on the CPU here; the
same arrays and operations run on a Mac's GPU."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mlx.core", reason="needs mlx (Linux: pip install 'mlx[cpu]')")

import torch  # noqa: E402

from cosyvoice_mac.config import read_yaml_config  # noqa: E402
from cosyvoice_mac.mlx.flow import MlxFlow  # noqa: E402
from cosyvoice_mac.mlx.networks import PipelineFlow  # noqa: E402
from cosyvoice_mac.models.flow import FlowConfig  # noqa: E402
from cosyvoice_mac.pipeline import CosyVoice  # noqa: E402
from tests.fakes.onnx_models import make_tiny_model_dir  # noqa: E402
from tests.parity.common import parity_dir  # noqa: E402
from tests.test_flow_first_chunk_prefix import assert_a_new_voice_streams_a_prepared_ones_audio_without_a_build  # noqa: E402

TOLERANCE = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module", params=("cosyvoice3", "cosyvoice2"))
def flow(request):
    folder = parity_dir() / f"{request.param}_tiny"
    config = FlowConfig.from_yaml(read_yaml_config(folder / f"{request.param}.yaml")["flow"])
    return MlxFlow.from_checkpoint(config, folder / "flow.pt")


def _sizes(config: FlowConfig) -> tuple[int, int]:
    """(prefix tokens, prompt tokens): two attention chunks cached, the look-ahead and a chunk of prompt after."""
    chunk = config.estimator.static_chunk_size // config.token_mel_ratio
    return 2 * chunk, 3 * chunk + config.pre_lookahead_len


def _prompt(config: FlowConfig, tokens: int, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    return (
        torch.randint(0, config.vocab_size, (1, tokens), generator=generator),
        torch.randn(1, config.token_mel_ratio * tokens, 80, generator=generator),
        torch.randn(1, 192, generator=generator),
    )


def _tokens(config: FlowConfig, count: int, seed: int = 2) -> torch.Tensor:
    return torch.randint(0, config.vocab_size, (1, count), generator=torch.Generator().manual_seed(seed))


def test_the_recorded_prefix_and_first_chunk_equal_a_built_prefix_and_the_uncached_chunk(flow):
    prefix_tokens, prompt_tokens = _sizes(flow.config)
    prompt = _prompt(flow.config, prompt_tokens)
    first = _tokens(flow.config, 13)
    mel, recorded = flow.first_chunk_recording_prefix(first, *prompt, prefix_tokens=prefix_tokens)
    torch.testing.assert_close(mel, flow.inference(first, *prompt, streaming=True, finalize=False), **TOLERANCE)
    built = flow.build_prefix(*prompt, tokens=prefix_tokens)
    frames = flow.config.token_mel_ratio * prefix_tokens
    assert (recorded.tokens, recorded.frames) == (built.tokens, built.frames) == (prefix_tokens, frames)
    assert recorded.matches(prompt[0], prompt[2]) and len(recorded.steps) == len(built.steps)
    for mine, theirs in zip(recorded.steps, built.steps):
        assert mine.frames == theirs.frames == frames and not mine.recording
        assert mine.tensors.keys() == theirs.tensors.keys()
        for key, array in theirs.tensors.items():  # attention keys/values and causal-conv context
            assert mine.tensors[key].shape == array.shape, key
            np.testing.assert_allclose(np.array(mine.tensors[key]), np.array(array), **TOLERANCE, err_msg=key)
    later = _tokens(flow.config, 38, seed=3)  # read through each prefix
    through_recorded = flow.inference(later, *prompt, streaming=True, finalize=False, prefix=recorded)
    through_built = flow.inference(later, *prompt, streaming=True, finalize=False, prefix=built)
    torch.testing.assert_close(through_recorded, through_built, **TOLERANCE)
    torch.testing.assert_close(
        through_recorded, flow.inference(later, *prompt, streaming=True, finalize=False), **TOLERANCE
    )


def test_a_prefix_that_is_not_whole_chunks_inside_the_prompt_is_refused_by_name(flow):
    from cosyvoice_mac.models.flow.cfm import FlowInputError

    prefix_tokens, prompt_tokens = _sizes(flow.config)
    with pytest.raises(FlowInputError, match="a cached prefix must be a positive multiple of"):
        flow.first_chunk_recording_prefix(
            _tokens(flow.config, 13), *_prompt(flow.config, prompt_tokens), prefix_tokens=prefix_tokens + 1
        )


@pytest.mark.parametrize("version", ["cosyvoice3", "cosyvoice2"])
def test_a_new_voice_on_the_mlx_engine_streams_the_audio_of_a_prepared_one_without_a_separate_build(
    version, tmp_path, make_speech, monkeypatch
):
    from cosyvoice_mac.mlx.speech_lm import MlxSpeechLM

    model = CosyVoice.from_pretrained(make_tiny_model_dir(version, tmp_path / version), device="cpu", engine="mlx")
    assert isinstance(model.networks.flow, PipelineFlow)
    # The tiny random LLM speaks to its length limit (up to 20 tokens a text id): 60 tokens are three chunks.
    monkeypatch.setattr(MlxSpeechLM, "length_limits", lambda lm, text_length: (60, 60))
    assert_a_new_voice_streams_a_prepared_ones_audio_without_a_build(model, make_speech, monkeypatch)
