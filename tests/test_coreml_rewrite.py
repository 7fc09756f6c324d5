"""The split vocoder in torch: every graph rewrite against HiFT, the host source, chunking, goldens.

No coremltools needed: these check that what gets converted computes what HiFT computes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cosyvoice_mac.coreml.host import (
    HostSource,
    finish_waveform,
    interleave,
    istft_envelope,
    pad_polyphase,
    plan_chunks,
)
from cosyvoice_mac.coreml.rewrite import (
    FoldedSnake,
    TransposedCausalUpsample,
    build_graphs,
    polyphase_istft_kernel,
    polyphase_stft_kernel,
)
from cosyvoice_mac.coreml.split import CHUNK_CONTEXT, torch_split_vocoder
from cosyvoice_mac.models.vocoder import GaussianSourceNoise, RecordedSourceNoise
from cosyvoice_mac.models.vocoder.layers import CausalUpsample, Snake
from cosyvoice_mac.models.vocoder.stft import ConvSTFT
from tests.coreml.models import VERSIONS, snr_db, speechlike_hift, speechlike_mel, tiny_hift
from tests.parity.common import ParityContext, assert_close, parity_dir

REWRITE_SNR_DB = 100.0


def decode_with_graph(decoder, mel: torch.Tensor, source: torch.Tensor, audio_limit: float = 0.99) -> np.ndarray:
    """DecoderGraph + host normalisation: mel (1, 80, T), source (1, 1, 480 T) -> wave (480 T,)."""
    polyphase = torch.from_numpy(pad_polyphase(source.reshape(-1).numpy()))
    with torch.inference_mode():
        overlap_added = decoder(mel, polyphase).numpy()
    return finish_waveform(interleave(overlap_added), audio_limit)


# --- pieces -------------------------------------------------------------------------------------


def test_polyphase_stft_equals_conv_stft():
    stft = ConvSTFT(16, 4)
    signal = torch.randn(480 * 7, generator=torch.Generator().manual_seed(0))
    expected = stft.stft(signal[None])
    polyphase = torch.from_numpy(pad_polyphase(signal.numpy()))
    actual = F.conv1d(polyphase, polyphase_stft_kernel(stft.analysis_kernel))
    assert actual.shape == expected.shape == (1, 18, 120 * 7 + 1)
    assert snr_db(expected, actual) >= 130


def test_polyphase_istft_and_host_envelope_equal_conv_istft():
    stft = ConvSTFT(16, 4)
    spectrum = 3 * torch.randn(1, 18, 120 * 5 + 1, generator=torch.Generator().manual_seed(1))
    expected = stft.istft(spectrum)[0].numpy()
    overlap_added = F.conv1d(spectrum, polyphase_istft_kernel(stft.synthesis_kernel), padding=3)
    assert overlap_added.shape == (1, 4, 120 * 5 + 4)
    actual = finish_waveform(interleave(overlap_added.numpy()), audio_limit=math.inf)
    assert actual.shape == expected.shape == (480 * 5,)
    assert snr_db(expected, actual) >= 130


def test_istft_envelope_is_not_constant_at_the_edges():
    envelope = istft_envelope(480)
    assert envelope.shape == (480,)
    np.testing.assert_allclose(envelope[8:-8], 1.5, rtol=1e-6)
    assert envelope[0] < 1.3 and envelope[-1] < 1.5 - 1e-3


def test_folded_snake_is_bit_equal():
    snake = Snake(16)
    with torch.no_grad():
        snake.alpha.uniform_(0.2, 2.0, generator=torch.Generator().manual_seed(0))
    x = 3 * torch.randn(1, 16, 333, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(FoldedSnake(snake.alpha)(x), snake(x.clone()))


@pytest.mark.parametrize(("kernel", "rate"), [(16, 8), (11, 5), (7, 3)])
def test_transposed_causal_upsample_has_fixed_trims_and_equals_the_layer(kernel, rate):
    layer = CausalUpsample(6, 5, kernel, rate)
    rewritten = TransposedCausalUpsample(layer)
    for frames in (1, 17):
        x = torch.randn(1, 6, frames, generator=torch.Generator().manual_seed(frames))
        with torch.no_grad():
            assert torch.equal(rewritten(x), layer(x))


# --- whole graphs against HiFT --------------------------------------------------------------------


def parity_mels(version: str) -> list[torch.Tensor]:
    ctx = ParityContext(parity_dir(), version)
    return [ctx.vectors("hift")["mel_in"], ctx.vectors("e2e")["mel"]]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("size", ["tiny", "full"])
def test_graphs_equal_hift_in_float32(version, size):
    """Tiny parity model on the parity vectors' mels; full size (speech-like random weights) on 16 frames."""
    if size == "tiny":
        for mel in parity_mels(version):
            check_graphs_against_hift(tiny_hift(version), mel)
    else:
        check_graphs_against_hift(speechlike_hift(version), speechlike_mel(16, seed=3))


def check_graphs_against_hift(hift, mel: torch.Tensor) -> None:
    f0_graph, decoder = build_graphs(hift)
    with torch.inference_mode():
        f0_reference = hift.f0_predictor(mel)  # CosyVoice3: float64 on the CPU, as upstream
        f0 = f0_graph(mel)
        source = hift.m_source(f0_reference, GaussianSourceNoise(seed=4))
        expected = hift.decode(mel, source)[0].numpy()
    assert f0.dtype == torch.float32 and f0.shape == f0_reference.shape
    assert snr_db(f0_reference, f0) >= REWRITE_SNR_DB
    actual = decode_with_graph(decoder, mel, source, hift.config.audio_limit)
    assert expected.std() > 1e-3, "the test signal is silent"
    assert snr_db(expected, actual) >= REWRITE_SNR_DB


def test_graphs_do_not_change_the_live_vocoder():
    hift = tiny_hift("cosyvoice3")
    before = {name: tensor.clone() for name, tensor in hift.state_dict().items()}
    _, decoder = build_graphs(hift)
    with torch.no_grad():
        next(decoder.parameters()).add_(1.0)
    assert all(torch.equal(before[name], tensor) for name, tensor in hift.state_dict().items())


# --- host source ----------------------------------------------------------------------------------


@torch.no_grad()
def float64_reference_source(hift, f0: torch.Tensor, noise: torch.Tensor) -> np.ndarray:
    """Upstream's SineGen2 + l_linear with every step in float64 (unwrapped phase; fine for seconds)."""
    source, step = hift.m_source, hift.config.samples_per_frame
    f0 = f0.double()  # cpu-only: test reference
    overtones = torch.arange(1, source.harmonics + 1, dtype=torch.float64)  # cpu-only: test reference
    per_sample = (f0[:, :, None] * overtones / source.sampling_rate) % 1  # (1, T, H)
    phase = (torch.cumsum(per_sample, dim=1) * 2 * math.pi).transpose(1, 2) * step
    if source.nearest_phase:
        phase = phase.repeat_interleave(step, dim=-1)
    else:
        phase = F.interpolate(phase, scale_factor=float(step), mode="linear")
    voiced = (f0 > source.voiced_threshold).repeat_interleave(step, dim=-1)[:, None]
    amp = torch.where(voiced, source.noise_std, source.sine_amp / 3)
    excitation = torch.sin(phase) * source.sine_amp * voiced + noise.double() * amp  # cpu-only: test reference
    weight = source.l_linear.weight.double()  # cpu-only: test reference
    merged = excitation.transpose(1, 2) @ weight.T + source.l_linear.bias.double()  # cpu-only: test reference
    return torch.tanh(merged)[0, :, 0].numpy()


@pytest.mark.parametrize("version", VERSIONS)
def test_host_source_equals_a_float64_reference(version):
    hift = tiny_hift(version)
    frames = 50
    f0 = torch.linspace(0, 400, frames)[None] * (torch.arange(frames) % 7 != 0)  # voiced and unvoiced frames
    noise = GaussianSourceNoise(seed=2).take(frames * 480)
    actual = HostSource.from_hift(hift)(f0[0].numpy(), RecordedSourceNoise(noise.transpose(1, 2)))
    expected = float64_reference_source(hift, f0, noise)
    assert actual.dtype == np.float32 and actual.shape == (frames * 480,)
    assert snr_db(expected, actual) >= REWRITE_SNR_DB


def test_host_source_phase_stays_exact_for_long_audio():
    source = HostSource.from_hift(tiny_hift("cosyvoice2"))
    f0 = np.full(15000, 440.0, dtype=np.float32)  # 300 s: the unwrapped phase reaches 8e6 rad
    cycles, _ = source.cycles(f0)
    expected = np.mod(np.arange(1, 15001)[:, None] * (480 * 440.0 * np.arange(1, 10) / 24000), 1.0)
    error = np.abs((cycles - expected + 0.5) % 1.0 - 0.5).max()
    assert error < 1e-7  # cycles: 6e-7 rad, a sine error below -120 dB (float32 phase: ~1 rad here)


def test_host_source_continues_phase_and_applies_cache():
    source = HostSource.from_hift(tiny_hift("cosyvoice2"))
    f0 = np.linspace(80, 300, 20).astype(np.float32)
    whole, _ = source.cycles(f0)
    first, _ = source.cycles(f0[:8])
    rest, _ = source.cycles(f0[8:], start_cycles=first[-1])
    np.testing.assert_allclose(np.concatenate([first, rest]), whole, atol=1e-12)
    cache = np.full(3840, 0.25, dtype=np.float32)
    out = source(f0, GaussianSourceNoise(seed=1), cache_source=cache)
    assert np.all(out[:3840] == 0.25) and not np.all(out[3840:] == 0.25)


# --- chunking -------------------------------------------------------------------------------------


@pytest.mark.parametrize("frames", [20, 21, 59, 150, 333])
def test_chunk_plan_covers_every_frame_once_with_context(frames):
    size, left, right = 20, 6, 4
    plan = plan_chunks(frames, size, left, right) if frames >= size else None
    if plan is None:
        with pytest.raises(ValueError):
            plan_chunks(frames, size, left, right)
        return
    assert plan[0].start == 0 and plan[0].keep_from == 0 and plan[-1].keep_to == frames
    assert plan[-1].start + size == frames
    for before, after in zip(plan, plan[1:]):
        assert before.keep_to == after.keep_from
    for chunk in plan:
        assert chunk.size == size and 0 <= chunk.start and chunk.start + size <= frames
        assert chunk.keep_from < chunk.keep_to
        if chunk.keep_from > 0:
            assert chunk.keep_from - chunk.start >= left
        if chunk.keep_to < frames:
            assert chunk.start + size - chunk.keep_to >= right


@pytest.mark.parametrize("version", VERSIONS)
def test_chunked_decoding_equals_whole_utterance_decoding(version):
    hift = tiny_hift(version)
    left, right = CHUNK_CONTEXT[hift.config.causal]
    mel = speechlike_mel(170, seed=8)
    whole, _ = torch_split_vocoder(hift).inference(mel, noise=GaussianSourceNoise(seed=9))
    chunked_vocoder = torch_split_vocoder(hift, chunk_frames=left + right + 20)
    chunked, _ = chunked_vocoder.inference(mel, noise=GaussianSourceNoise(seed=9))
    assert len(chunked_vocoder.last_plan) > 3
    assert snr_db(whole, chunked) >= REWRITE_SNR_DB


# --- split vocoder against the golden vectors --------------------------------------------------------


def golden_calls(version: str):
    ctx = ParityContext(parity_dir(), version)
    hift = ctx.vectors("hift")
    v2 = version == "cosyvoice2"
    fixed = None if v2 else RecordedSourceNoise(hift["fixed_sine_waves_prefix"])
    yield (
        "callA",
        hift["mel_in"],
        {"noise": RecordedSourceNoise(hift["callA_rand1_randn_like"]) if v2 else fixed},
        (hift["callA_wave"], hift["callA_source"]),
    )
    if v2:  # CosyVoice3's callB is a finalize=False (streaming) call, which the split vocoder does not run
        yield (
            "callB",
            hift["callB_mel_in"],
            {"noise": RecordedSourceNoise(hift["callB_rand1_randn_like"]), "cache_source": hift["callB_cache_source"]},
            (hift["callB_wave"], hift["callB_source"]),
        )
    e2e = ctx.vectors("e2e")
    noise = RecordedSourceNoise(e2e["rand1_randn_like"]) if v2 else fixed
    yield "e2e", e2e["mel"], {"noise": noise}, (e2e["tts_speech"], None)


@pytest.mark.parametrize("version", VERSIONS)
def test_split_vocoder_matches_golden_vectors(version):
    vocoder = torch_split_vocoder(tiny_hift(version))
    for call, mel, kwargs, (wave, source) in golden_calls(version):
        actual_wave, actual_source = vocoder.inference(mel, **kwargs)
        assert_close(actual_wave, wave, "waveform", f"{version} split {call} wave")
        if source is not None:
            assert_close(actual_source, source, "waveform", f"{version} split {call} source")


def test_split_vocoder_rejects_what_it_cannot_do():
    v3 = torch_split_vocoder(tiny_hift("cosyvoice3"))
    mel = speechlike_mel(12)
    with pytest.raises(NotImplementedError, match="finalize"):
        v3.inference(mel, finalize=False)
    with pytest.raises(ValueError, match="cache_source"):
        v3.inference(mel, cache_source=torch.zeros(1, 1, 480))
    with pytest.raises(ValueError, match=r"\(1, 80, T"):
        v3.inference(torch.zeros(1, 81, 10))
    with pytest.raises(ValueError, match=r"\(1, 80, T\)"):
        v3.inference(torch.zeros(80, 10))


def test_split_vocoder_default_noise_is_the_versions_own():
    v3 = tiny_hift("cosyvoice3")
    mel = speechlike_mel(10)
    with torch.inference_mode():
        expected, _ = v3.inference(mel)  # CosyVoice3's fixed buffer
    actual, _ = torch_split_vocoder(v3).inference(mel)
    assert snr_db(expected, actual) >= 60  # float64 vs float32 phase only
