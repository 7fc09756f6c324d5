"""CosyVoice3's streamed vocoder calls as CUDA graphs (``models/cuda/vocoder_graphs.py``).

Which calls go to the graphs, and the policy (a shape captured on its second sighting, replayed after,
bounded, dropped when the weights move, eager for good after a failed capture) need no GPU: they run here
with a stand-in for the captured graph. The graphs themselves, and the phase integral on the device, need
CUDA (``COSYVOICE_TEST_DEVICE=cuda``; the device tool runs them): replayed calls equal eager ones bit for
bit, and the device's phase equals the CPU's.
"""

from __future__ import annotations

import os

import pytest
import torch

import cosyvoice_mac.models.cuda.vocoder_graphs as graphs
from cosyvoice_mac.models.cuda.vocoder_graphs import StreamedCallGraphs
from cosyvoice_mac.models.vocoder import load_hift
from cosyvoice_mac.models.vocoder.source import GaussianSourceNoise
from tests.test_hift import mel_frames, tiny_files

TEST_DEVICE = os.environ.get("COSYVOICE_TEST_DEVICE", "cpu")
cuda_only = pytest.mark.skipif(TEST_DEVICE != "cuda" or not torch.cuda.is_available(), reason="needs CUDA")


class StandInGraph:
    """Runs the call once at "capture" (as a capture records it) and again at each replay."""

    made = 0

    def __init__(self, call, mel, noise, pool):
        StandInGraph.made += 1
        self.call, self.noise = call, noise
        self.outputs = call(mel.clone())

    def replay(self, mel):
        return tuple(t.clone() for t in self.call(mel))


@pytest.fixture
def stand_in(monkeypatch):
    monkeypatch.setattr(graphs, "CallGraph", StandInGraph)
    monkeypatch.setattr(graphs, "try_cuda_capture", lambda capture, device: (capture(), None))
    monkeypatch.setattr(graphs.torch.cuda, "graph_pool_handle", lambda: "pool")
    StandInGraph.made = 0


class CountingCall:
    def __init__(self):
        self.calls = 0

    def __call__(self, mel):
        self.calls += 1
        return mel * 2, mel[:, :1] + 1


def test_a_shape_is_captured_on_its_second_sighting_and_replayed_after(stand_in):
    module, held, call = torch.nn.Linear(2, 2), StreamedCallGraphs(), CountingCall()
    mel = torch.randn(1, 80, 30)
    first = held.run(module, call, mel, 0, lambda: None)  # eager: seen once
    assert (held.captures, held.replays, call.calls) == (0, 0, 1)
    second = held.run(module, call, mel, 0, lambda: None)  # captured, then replayed
    third = held.run(module, call, mel + 1, 0, lambda: None)
    assert (held.captures, held.replays, StandInGraph.made) == (1, 2, 1)
    torch.testing.assert_close(second, first, atol=0, rtol=0)
    torch.testing.assert_close(third[0], (mel + 1) * 2, atol=0, rtol=0)
    held.run(module, call, mel, 4, lambda: None)  # another first frame is another shape: eager
    held.run(module, call, mel[:, :, :20], 0, lambda: None)  # so is another length
    assert held.captures == 1 and set(held.seen) == {(30, 0), (30, 4), (20, 0)}


def test_at_most_max_graphs_are_held_and_the_first_ones_stay(stand_in):
    module, held, call = torch.nn.Linear(2, 2), StreamedCallGraphs(max_graphs=2), CountingCall()
    for frames in (10, 20, 30):
        for _ in range(3):
            held.run(module, call, torch.zeros(1, 80, frames), 0, lambda: None)
    assert set(held.graphs) == {(10, 0), (20, 0)} and held.captures == 2
    assert held.report() == {
        "graphs": 2,
        "captures": 2,
        "replays": 4,
        "capture_s": held.report()["capture_s"],
        "error": None,
    }


def test_moved_weights_drop_the_graphs_and_what_was_seen(stand_in):
    module, held, call = torch.nn.Linear(2, 2), StreamedCallGraphs(), CountingCall()
    mel = torch.zeros(1, 80, 12)
    for _ in range(2):
        held.run(module, call, mel, 0, lambda: None)
    assert held.captures == 1
    module.weight.data = module.weight.data.clone()  # new memory: a graph would read the old
    held.run(module, call, mel, 0, lambda: None)
    assert not held.graphs and set(held.seen) == {(12, 0)} and held.captures == 1


def test_a_failed_capture_leaves_the_vocoder_eager(stand_in, monkeypatch):
    monkeypatch.setattr(graphs, "try_cuda_capture", lambda capture, device: (None, "RuntimeError: sync"))
    module, held, call = torch.nn.Linear(2, 2), StreamedCallGraphs(), CountingCall()
    mel = torch.ones(1, 80, 8)
    results = [held.run(module, call, mel, 0, lambda: None) for _ in range(3)]
    assert all(torch.equal(result[0], mel * 2) for result in results)
    assert "capture of the vocoder failed (RuntimeError: sync)" in held.error
    assert not held.wanted(torch.device("cuda")) and held.captures == 0


@pytest.mark.parametrize("version", ["cosyvoice3", "cosyvoice2"])
def test_only_cosyvoice3_streamed_calls_with_the_fixed_noise_go_to_the_graphs(version, monkeypatch):
    model = load_hift(*tiny_files(version))
    routed = []
    held = StreamedCallGraphs()
    monkeypatch.setattr(type(model), "_cuda_graphs", lambda self, device: held)  # as if the CPU were CUDA
    monkeypatch.setattr(StreamedCallGraphs, "wanted", lambda self, device: True)

    def run(self, module, call, mel, first_frame, noise_copy):
        routed.append((mel.shape[-1], first_frame))
        return call(mel)

    monkeypatch.setattr(StreamedCallGraphs, "run", run)
    mel = mel_frames(40)
    model.inference(mel)  # whole sentences and last chunks: lengths of their own
    model.inference(mel, noise=GaussianSourceNoise(seed=2))  # noise per call
    if version == "cosyvoice3":
        eager = model._vocode(mel, False, None, model.default_noise, 12)
        routed_result = model.inference(mel, finalize=False, first_frame=12)
        assert routed == [(40, 12)]
        for got, want in zip(routed_result, eager):
            torch.testing.assert_close(got, want, atol=0, rtol=0)
        model.inference(mel, finalize=False, noise=GaussianSourceNoise(seed=2))
        assert routed == [(40, 12)]
    else:
        model.inference(mel, cache_source=torch.zeros(1, 1, 480))
        assert routed == []


def test_fixed_noise_keeps_one_device_copy_that_equals_the_host_noise():
    noise = load_hift(*tiny_files("cosyvoice3")).default_noise
    device = torch.device("meta")  # a device other than the CPU, without one here
    first = noise.on_device(1000, device)
    assert first.shape == (1, 9, 1000) and first.device == device
    again = noise.on_device(500, device)
    assert again.data_ptr() == first.data_ptr() == noise.device_copy.data_ptr()  # the same memory each call
    host = noise.on_device(700, torch.device("cpu"))
    assert torch.equal(host, noise.take(700))


# --- on CUDA -----------------------------------------------------------------------------------------


@cuda_only
def test_the_phase_integral_on_cuda_equals_the_cpus():
    source = load_hift(*tiny_files("cosyvoice3")).m_source
    generator = torch.Generator().manual_seed(11)
    f0 = torch.rand(1, 20000, generator=generator) * 500  # 400 s of frames
    f0[:, ::7] = 0.0  # unvoiced frames
    f0[:, 5::97] *= 1e-4  # terms far below 2**-14
    on_cpu = source.frame_phase(f0)
    on_cuda = source.frame_phase(f0.cuda())
    assert on_cuda.device.type == "cuda"
    assert torch.equal(on_cuda.cpu(), on_cpu)


@cuda_only
def test_streamed_calls_replayed_as_graphs_equal_eager_calls_bit_for_bit(monkeypatch):
    # cuDNN's default algorithms vary run to run (two eager runs differ by ~3e-8 on an H200);
    # deterministic ones show the graph computes exactly what the eager call does.
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    model = load_hift(*tiny_files("cosyvoice3")).to(TEST_DEVICE)
    mel = mel_frames(300).to(TEST_DEVICE)
    chunks = [(28, 0), (78, 20), (178, 70), (300, 170)]  # (mel frames so far, first new frame)

    def stream():
        return [model.inference(mel[:, :, :frames], finalize=False, first_frame=first) for frames, first in chunks]

    monkeypatch.setenv("COSYVOICE_VOCODER_GRAPHS", "0")
    eager = stream()
    monkeypatch.setenv("COSYVOICE_VOCODER_GRAPHS", "1")
    for _ in range(3):  # seen once (eager), captured, replayed
        for (wave, source), (eager_wave, eager_source) in zip(stream(), eager):
            torch.testing.assert_close(wave, eager_wave, atol=0, rtol=0)
            torch.testing.assert_close(source, eager_source, atol=0, rtol=0)
    held = model.streamed_graphs
    assert held.error is None and held.captures == len(chunks) and held.replays == 2 * len(chunks)
    model.cpu()
    assert not held.graphs
