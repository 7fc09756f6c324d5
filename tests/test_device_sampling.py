"""Sampling on the device (``models/cuda/device_sampling.py``) draws the host RasSampler's ids for the same
seed: the torch fact it rests on, the pick itself over long runs (repetition re-draws, min_len, the
variate ring wrapping), and the pipelined decoding loop on a tiny model. On CUDA
(``COSYVOICE_TEST_DEVICE=cuda``) the same loop with its graphs against the host sampler."""

from __future__ import annotations

import os

import pytest
import torch

from cosyvoice_mac.bench.opcount import prompt_embeddings, random_tiny_speech_lm
from cosyvoice_mac.models.cuda import decode_graphs, triton_kernels
from cosyvoice_mac.models.cuda.device_sampling import OFFSET, DeviceRas
from cosyvoice_mac.models.llm import DecodeOptions
from cosyvoice_mac.models.llm.sampling import RasSampler

TEST_DEVICE = os.environ.get("COSYVOICE_TEST_DEVICE", "cpu")
cuda_only = pytest.mark.skipif(TEST_DEVICE != "cuda" or not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("size", [1, 7, 25, 503])
def test_multinomial_is_the_argmax_of_probs_over_a_stream_of_exponentials(size):
    """The fact the device sampler rests on: one CPU multinomial draw of n categories is argmax(p / E) with
    E the generator's next n exponential variates, drawn one after another (so a longer draw's head is a
    shorter draw's, and draws chain). If a torch release changes this, device sampling must be turned off."""
    for seed in range(20):
        drawing, streaming = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        stream = torch.empty(3 * size).exponential_(generator=streaming)
        for draw in range(3):
            probs = torch.softmax(3 * torch.randn(size), dim=0)
            expected = int(torch.multinomial(probs, 1, replacement=True, generator=drawing))
            assert int(torch.argmax(probs / stream[draw * size : (draw + 1) * size])) == expected


def _logp_stream(steps: int, vocab: int, seed: int, *, tied: bool = False) -> list[torch.Tensor]:
    """Peaked random log-probs, so the same id comes back often and repetition re-draws happen; ``tied``:
    logits on a coarse grid (as 16-bit logits are), so many ids share a probability."""
    generator = torch.Generator().manual_seed(seed)
    logits = [4 * torch.randn(vocab, generator=generator) for _ in range(steps)]
    return [torch.log_softmax(x.round() if tied else x, dim=0) for x in logits]


@pytest.mark.parametrize("vocab", [25, 61, 6761])
def test_ranked_head_is_the_head_of_the_hosts_stable_descending_sort(vocab):
    """The top-k that stands in for a full sort on the device keeps the host's order exactly: ties by
    ascending id, zero probabilities (masked ids) last by ascending id, the probabilities bit for bit."""
    ras = DeviceRas((0.8, 25, 10, 0.1), (), vocab, torch.device("cpu"))
    generator = torch.Generator().manual_seed(vocab)
    for finite_share in (1.0, 0.3, 3 / vocab):
        levels = torch.randint(0, 4, (vocab,), generator=generator).float()  # four distinct logits: ties everywhere
        logits = levels.masked_fill(torch.rand(vocab, generator=generator) >= finite_share, float("-inf"))
        logits[vocab // 2] = 5.0  # at least one finite logit
        probs = torch.softmax(logits, dim=0)
        head, ids = ras._ranked_head(probs)
        sorted_probs, sorted_ids = probs.sort(descending=True, stable=True)
        assert torch.equal(ids, sorted_ids[: ras.top_k])
        assert torch.equal(head, sorted_probs[: ras.top_k])


@cuda_only
@pytest.mark.parametrize("vocab", [25, 61, 6564, 6761, triton_kernels.MAX_VOCAB])
def test_the_triton_head_ranks_as_atens_topk_over_the_keys(vocab):
    """The CUDA kernel against the keys' ``topk``: ties and masked (zero) probabilities included."""
    ras = DeviceRas((0.8, 25, 10, 0.1), (), vocab, torch.device("cuda"))
    generator = torch.Generator().manual_seed(vocab)
    for finite_share in (1.0, 0.3, 3 / vocab):
        levels = torch.randint(0, 4, (vocab,), generator=generator).float()
        logits = levels.masked_fill(torch.rand(vocab, generator=generator) >= finite_share, float("-inf"))
        logits[vocab // 2] = 5.0
        probs = torch.softmax(logits, dim=0).cuda()
        assert triton_kernels.fits(probs, ras.top_k)
        keys = (probs.view(torch.int32).long() << ras._id_bits) | ras._reversed_ids
        expected = keys.topk(ras.top_k).values
        assert torch.equal(triton_kernels.ranked_head_keys(probs, ras.top_k, ras._id_bits), expected)
        assert torch.equal(torch.compile(triton_kernels.ranked_head_keys)(probs, ras.top_k, ras._id_bits), expected)


def test_the_triton_head_serves_only_cuda_vectors_it_can_hold():
    probs = torch.full((6761,), 1 / 6761)
    assert not triton_kernels.fits(probs, 25)  # a CPU tensor: ATen's topk
    if torch.cuda.is_available() and triton_kernels.triton is not None:
        assert triton_kernels.fits(probs.cuda(), 25)
        assert not triton_kernels.fits(torch.ones(triton_kernels.MAX_VOCAB + 1, device="cuda"), 25)


@pytest.mark.parametrize("seed, tied", [(0, False), (7, False), (3, True)])
def test_device_pick_chooses_the_host_samplers_ids_for_the_same_seed(seed, tied):
    vocab, steps, min_len, masked = 61, 400, 30, (58, 59, 60)
    host, device = RasSampler(seed=seed), RasSampler(seed=seed)
    ras = DeviceRas(DeviceRas.settings_of(device), masked, vocab, torch.device("cpu"))
    ras.begin(device, min_len)
    token_out = torch.zeros(1, dtype=torch.long)
    history: list[int] = []
    repeats = 0
    for step, logp in enumerate(_logp_stream(steps, vocab, seed, tied=tied)):
        ignore = masked if step < min_len else ()
        expected = host(
            logp.clone().index_fill_(0, torch.tensor(ignore, dtype=torch.long), float("-inf")), history, ignore
        )
        before = int(ras.vector[OFFSET])
        ras.top_up(before)
        ras.pick(logp, token_out)
        repeats += int(ras.vector[OFFSET]) - before > ras.top_k
        assert int(token_out) == expected, f"step {step}: device {int(token_out)}, host {expected}"
        if step < min_len:
            assert expected not in masked
        history.append(expected)
    assert repeats > 20  # the re-draw from the full distribution was exercised, many times
    assert ras.drawn > 2 * ras.size  # and the variate ring wrapped around


def test_the_pick_compiled_by_torch_compile_chooses_the_host_samplers_ids():
    """On CUDA the fused step compiles the pick with it (``DecodeGraphs.sampled_graph_step``): inductor's
    version of the ranking keys (bit casts, an int64 top-k) and of the in-place state must draw the host's ids
    too, ties included. Inductor on the CPU here; the CUDA loop test runs Triton's."""
    vocab, min_len, masked = 61, 30, (58, 59, 60)
    host, device = RasSampler(seed=3), RasSampler(seed=3)
    ras = DeviceRas(DeviceRas.settings_of(device), masked, vocab, torch.device("cpu"))
    ras.begin(device, min_len)
    pick, token_out, history = torch.compile(ras.pick), torch.zeros(1, dtype=torch.long), []
    for step, logp in enumerate(_logp_stream(200, vocab, 3, tied=True)):
        ignore = masked if step < min_len else ()
        expected = host(
            logp.clone().index_fill_(0, torch.tensor(ignore, dtype=torch.long), float("-inf")), history, ignore
        )
        ras.top_up(int(ras.vector[OFFSET]))
        pick(logp, token_out)
        assert int(token_out) == expected, f"step {step}: compiled pick {int(token_out)}, host {expected}"
        history.append(expected)


def test_top_up_keeps_the_two_steps_in_flight_supplied_and_never_overwrites_what_they_read():
    ras = DeviceRas((0.8, 25, 10, 0.1), (), 40, torch.device("cpu"))
    ras.begin(RasSampler(seed=1), 0)
    for known in range(0, 20 * ras.worst_step, 37):  # stream positions the host has read up to
        ras.top_up(known)
        assert ras.drawn >= known + 2 * ras.worst_step  # what the next two steps may consume is written
        assert ras.drawn - ras.size < known


def _sentences(lm, seed: int, *, on_device: bool, monkeypatch, lengths) -> tuple[list[list[int]], torch.Tensor]:
    """Tokens of one request's sentences (one sampler serves them all, as in the pipeline), and the
    generator's state after them."""
    embeds = prompt_embeddings(lm)
    sampler = lm.make_sampler(seed=seed)
    with monkeypatch.context() as patch:
        if on_device:  # the graphs' loop, its steps run eagerly (CPU): samples_on_device is CUDA-only
            patch.setattr(lm.decoding, "samples_on_device", lambda sampler, on_step: True)
        tokens = [list(lm._decode(embeds, low, high, sampler, None)) for low, high in lengths]
    return tokens, sampler.generator.get_state()


@pytest.mark.parametrize("seed", [3, 11])
def test_pipelined_device_loop_yields_the_host_loops_tokens(monkeypatch, seed):
    lm = random_tiny_speech_lm()
    lm.decoding.options = DecodeOptions(cuda_graphs=False, bucket=16)
    lengths = ((40, 40), (0, 60), (0, 60), (25, 25))  # forced to the end; free to stop (v3: ids >= S stop it)
    host, host_state = _sentences(lm, seed, on_device=False, monkeypatch=monkeypatch, lengths=lengths)
    device, device_state = _sentences(lm, seed, on_device=True, monkeypatch=monkeypatch, lengths=lengths)
    assert device == host  # every sentence: the generator is left where the host sampler leaves it
    assert torch.equal(device_state, host_state)
    assert len(host[0]) == 40 and len(host[1]) < 60  # the stop path is covered too


def test_a_sampled_step_whose_compile_fails_runs_the_plain_step_and_pick(monkeypatch):
    """Under the graphs a sampled step is ``torch.compile(step + pick)``; a compile that fails there leaves the plain
    step and pick (the same tokens) and says why, instead of failing the request. On the CPU: graphs mode, the
    compile's failure and a capture that cannot happen are simulated."""
    lm = random_tiny_speech_lm()
    lm.decoding.options = DecodeOptions(cuda_graphs=False, bucket=16)
    lengths = ((30, 30),)
    host, _ = _sentences(lm, 5, on_device=False, monkeypatch=monkeypatch, lengths=lengths)

    def failing_compile(function, **_):
        def compiled(*args):
            raise RuntimeError("no Triton here")

        return compiled

    runner = lm.decoding
    runner.options = DecodeOptions(cuda_graphs=True, fuse=True, bucket=16)
    monkeypatch.setattr(type(runner), "mode", property(lambda self: "graphs"))
    monkeypatch.setattr(torch, "compile", failing_compile)
    monkeypatch.setattr(decode_graphs, "try_cuda_capture", lambda capture, device: (False, "no CUDA here"))
    device, _ = _sentences(lm, 5, on_device=True, monkeypatch=monkeypatch, lengths=lengths)
    assert device == host
    assert runner.fuse_error.startswith("torch.compile of the sampled decoding step failed (RuntimeError")


def test_a_request_abandoned_midway_leaves_the_generator_after_the_tokens_it_read(monkeypatch):
    lm = random_tiny_speech_lm()
    lm.decoding.options = DecodeOptions(cuda_graphs=False, bucket=16)
    embeds = prompt_embeddings(lm)
    states = []
    for on_device in (False, True):
        sampler = lm.make_sampler(seed=5)
        with monkeypatch.context() as patch:
            if on_device:
                patch.setattr(lm.decoding, "samples_on_device", lambda sampler, on_step: True)
            stream = lm._decode(embeds, 50, 50, sampler, None)
            first = [next(stream) for _ in range(7)]
            stream.close()  # a stopped request (should_stop) closes the token stream
        states.append((first, sampler.generator.get_state()))
    assert states[0][0] == states[1][0] and torch.equal(states[0][1], states[1][1])


def test_only_a_plain_seeded_ras_sampler_is_served_on_the_device():
    assert DeviceRas.serves(RasSampler(seed=0))
    assert not DeviceRas.serves(RasSampler(seed=0, draw=lambda probs, kind: 0))  # replayed draws stay on the host
    lm = random_tiny_speech_lm()
    assert not lm.decoding.samples_on_device(lm.make_sampler(seed=0), None)  # CPU: the host sampler


@cuda_only
def test_cuda_graphs_with_device_sampling_yield_the_host_samplers_tokens():
    torch.backends.cuda.matmul.allow_tf32 = False
    lm = random_tiny_speech_lm().to("cuda")
    embeds = prompt_embeddings(lm).to("cuda")

    def tokens(device_sampling: bool, seed: int) -> list[int]:
        lm.decoding.options = DecodeOptions(cuda_graphs=True, bucket=64, device_sampling=device_sampling)
        sampler = lm.make_sampler(seed=seed)
        assert lm.decoding.samples_on_device(sampler, None) == device_sampling
        return list(lm._decode(embeds, 150, 150, sampler, None))

    for seed in (0, 1):
        host, device = tokens(False, seed), tokens(True, seed)
        assert lm.decoding.graph_error is None
        assert device == host  # a float32 softmax on another device could flip a near tie: none expected here
    assert lm.decoding.report()["sampled_graphs"]  # the sampled steps were captured, not run eagerly


def test_graphs_captured_with_other_step_options_are_not_reused():
    """A runner whose options changed (the fused step asked for, another bucket) must capture again: its
    signature, which start() compares before reusing graphs, says so."""
    lm = random_tiny_speech_lm()
    runner = lm.decoding
    runner.options = DecodeOptions(cuda_graphs=True, fuse=False)
    plain = runner._current_signature()
    runner.options = DecodeOptions(cuda_graphs=True, fuse=True)
    assert runner._current_signature() != plain
    runner.options = DecodeOptions(cuda_graphs=True, fuse=False, bucket=64)
    assert runner._current_signature() != plain


def test_a_superseded_requests_late_close_leaves_the_newer_requests_sampler_alone(monkeypatch):
    """An older token stream closed after a newer request began (or collected later) must not reset the
    newer request's generator: the newer one still yields the host sampler's tokens."""
    lm = random_tiny_speech_lm()
    lm.decoding.options = DecodeOptions(cuda_graphs=False, bucket=16)
    embeds = prompt_embeddings(lm)
    expected = list(lm._decode(embeds, 150, 150, lm.make_sampler(seed=9), None))
    monkeypatch.setattr(lm.decoding, "samples_on_device", lambda sampler, on_step: True)
    older = lm._decode(embeds, 30, 30, lm.make_sampler(seed=2), None)
    next(older)
    newer = lm._decode(embeds, 150, 150, lm.make_sampler(seed=9), None)
    head = [next(newer) for _ in range(10)]
    older.close()
    rest = list(newer)
    assert head + rest == expected  # (without the guard the newer's stream is rewound: its later draws differ)
