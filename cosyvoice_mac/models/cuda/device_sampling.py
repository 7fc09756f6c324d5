"""Repetition-aware sampling as device operations, drawing exactly what :class:`RasSampler` draws.

The host sampler costs a device-to-host copy of the log-probabilities, a sort on the CPU and the
host's attention every token; while it runs the GPU is idle. :class:`DeviceRas` does the same choice
with tensor operations only (no host sync), so a CUDA graph can capture it after the decoding step
and the next step can be queued before the host has read this one's token.

The seeded contract is kept bit for bit: ``torch.multinomial(p, 1)`` on the CPU is
``argmax(p / E)`` where ``E`` holds ``len(p)`` exponential variates drawn one after another from the
sampler's generator (``tests/test_device_sampling.py`` checks this against torch). A nucleus draw
consumes ``count`` of them, a repetition re-draw ``V``. The host draws the same stream ahead into a
ring on the device (``top_up``) and the device keeps the stream position (``offset``), so both
sides read the same variates in the same order. Only rounding can differ on another device (a
float32 softmax or cumulative sum computed in another order), as it does for the logits anyway.
"""

from __future__ import annotations

import math

import torch

from cosyvoice_mac.models.cuda import triton_kernels
from cosyvoice_mac.models.llm.sampling import RasSampler

TOKEN, OFFSET, EMITTED, STEP, MIN_LEN = range(5)  # slots of DeviceRas.vector
RING_DRAWS = 6  # the ring holds this many worst-case steps of variates (see top_up)


class DeviceRas:
    """Owns the on-device state of one model's repetition-aware sampler (reused across requests).

    ``vector`` (5,) long: the last token, the variate stream's position, tokens emitted, steps sampled,
    the request's min_len. ``window`` (win_size,) long: the last emitted ids (-1 = none yet), at
    ``emitted % win_size``. ``variates`` (R,) float32: the exponential stream, index ``s`` at
    ``s % R``. ``masked`` (V,) bool: ids forbidden while ``step < min_len``. Every tensor keeps its
    address, so a graph that captured :meth:`pick` stays valid; :meth:`begin` resets them in place.
    """

    def __init__(self, settings: tuple, masked_ids, vocab: int, device: torch.device):
        self.settings = settings  # (top_p, top_k, win_size, tau_r) of the samplers it serves
        top_p, top_k, win_size, tau_r = settings
        self.top_p, self.top_k, self.win_size = top_p, min(top_k, vocab), win_size
        self.repeat_count = math.ceil(win_size * tau_r)  # an integer count >= win*tau_r iff >= its ceiling
        self.vocab = vocab
        self.worst_step = self.top_k + vocab  # variates one step may consume
        self.size = RING_DRAWS * self.worst_step
        self.device = device
        self.vector = torch.zeros(5, dtype=torch.long, device=device)
        self.window = torch.full((win_size,), -1, dtype=torch.long, device=device)
        self.variates = torch.ones(self.size, device=device)
        self.masked = torch.zeros(vocab, dtype=torch.bool, device=device)
        if len(masked_ids):
            self.masked[torch.as_tensor(list(masked_ids), dtype=torch.long, device=device)] = True
        self._head = torch.arange(self.top_k, device=device)
        self._all = torch.arange(vocab, device=device)
        # ranking keys (see _ranked_head): an id's place below its probability's bits, reversed so lower ids rank first
        self._id_bits = max(1, (vocab - 1).bit_length())
        self._id_mask = (1 << self._id_bits) - 1
        self._reversed_ids = self._id_mask - self._all
        self._generator: torch.Generator | None = None
        self.drawn = 0  # variates written into the ring so far (stream positions 0..drawn-1)
        self._pieces: list[tuple[int, torch.Tensor]] = []  # (first stream position, generator state before it)
        self.request = 0  # which request the state serves now (begin() counts them)

    @staticmethod
    def settings_of(sampler: RasSampler) -> tuple:
        return sampler.top_p, sampler.top_k, sampler.win_size, sampler.tau_r

    @staticmethod
    def serves(sampler) -> bool:
        """Only a plain RasSampler drawing with its own generator (not a test's replayed draws), at the model's
        temperature (a request's own temperature is drawn on the host)."""
        return type(sampler) is RasSampler and sampler.draw == sampler._multinomial and sampler.temperature == 1.0

    # host side ------------------------------------------------------------------------------------
    def begin(self, sampler: RasSampler, min_len: int) -> int:
        """Reset for one request: its generator's stream from the start, ``min_len``, no history; returns the
        request's number, which :meth:`finish` needs."""
        self.request += 1
        self._generator = sampler.generator
        self.vector.zero_()
        self.vector[MIN_LEN] = min_len
        self.window.fill_(-1)
        self.drawn = 0
        self._pieces = []
        self.top_up(0)
        return self.request

    def finish(self, request: int, consumed: int) -> None:
        """Leave the sampler's generator as the host sampler would: ``consumed`` variates past the request's
        start (the stream position after the last step the host read), not the ``drawn`` ahead. A sampler
        serves every sentence of a request, so the next sentence must start where the host's would. A
        request superseded by a newer one (its stream closed later) touches nothing: the state is the newer's."""
        if request != self.request or not self._pieces:
            return
        start, state = next((piece for piece in reversed(self._pieces) if piece[0] <= consumed), self._pieces[0])
        self._generator.set_state(state)
        if consumed > start:
            torch.empty(consumed - start).exponential_(generator=self._generator)  # cpu-only: the generator
        self._pieces = []

    def top_up(self, known_offset: int) -> None:
        """Write the stream ahead so the next two steps after ``known_offset`` find their variates.

        Called before each launch with the stream position after the last step the host has read;
        up to two steps are in flight beyond it (the one being read and the one about to be queued).
        Writing at most ``RING_DRAWS - 2`` worst steps ahead never overwrites a variate they need.
        """
        if self.drawn >= known_offset + 3 * self.worst_step:
            return
        target = known_offset + (RING_DRAWS - 2) * self.worst_step
        count = target - self.drawn
        while len(self._pieces) > 1 and self._pieces[1][0] <= known_offset:
            self._pieces.pop(0)  # finish() never goes back before what the host has read
        self._pieces.append((self.drawn, self._generator.get_state()))
        fresh = torch.empty(count).exponential_(generator=self._generator)  # cpu-only: the sampler's generator
        if self.device.type == "cuda":
            fresh = fresh.pin_memory()  # so the copy below is queued, not waited for
        start = self.drawn % self.size
        first = min(count, self.size - start)
        self.variates[start : start + first].copy_(fresh[:first], non_blocking=True)
        if first < count:
            self.variates[: count - first].copy_(fresh[first:], non_blocking=True)
        self.drawn = target

    # device side ----------------------------------------------------------------------------------
    def _stream(self, offset: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.variates.index_select(0, (offset + positions).remainder_(self.size))

    def _ranked_head(self, probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``top_k`` largest of ``probs`` (V,) float32 and their ids, in the order of the host's stable
        descending sort (equal probabilities by ascending id), with one top-k instead of sorting all V.

        A non-negative float32's bit pattern read as an integer orders as its value, so the int64 key
        ``bits << id_bits | (id_mask - id)`` is unique per id and ranks exactly as the stable sort does;
        the head's probabilities and ids come back out of the keys bit for bit.
        """
        if triton_kernels.fits(probs, self.top_k):  # CUDA: Triton, not ATen's 64-bit radix passes
            top = triton_kernels.ranked_head_keys(probs, self.top_k, self._id_bits)
        else:
            keys = (probs.view(torch.int32).long() << self._id_bits) | self._reversed_ids
            top = keys.topk(self.top_k).values
        head = (top >> self._id_bits).to(torch.int32).view(torch.float32)
        return head, self._id_mask - (top & self._id_mask)

    def pick(self, logp: torch.Tensor, token_out: torch.Tensor) -> None:
        """Choose the next id from ``logp`` (V,) float32 into ``token_out`` (1,) long and advance the
        state: RasSampler's algorithm, step for step, with no host sync (capturable)."""
        vector = self.vector
        offset, emitted, step = vector[OFFSET : OFFSET + 1], vector[EMITTED : EMITTED + 1], vector[STEP : STEP + 1]
        below = step < vector[MIN_LEN : MIN_LEN + 1]
        scores = logp.float().masked_fill(self.masked & below, float("-inf"))
        probs = torch.softmax(scores, dim=0)
        head, head_ids = self._ranked_head(probs)
        count = 1 + (head.cumsum(0)[:-1] < self.top_p).sum().view(1)
        ratios = (head / self._stream(offset, self._head)).masked_fill_(self._head >= count, -1.0)
        token = head_ids.index_select(0, ratios.argmax().view(1))
        repeated = (self.window == token).sum().view(1) >= self.repeat_count
        rescored = scores.index_fill(0, token, float("-inf"))
        full = torch.softmax(rescored, dim=0) / self._stream(offset + count, self._all)
        token = torch.where(repeated, full.argmax().view(1), token)
        offset.add_(count + repeated.long() * self.vocab)
        self.window.index_copy_(0, emitted.remainder(self.win_size), token)
        emitted.add_(1)
        step.add_(1)
        vector[TOKEN : TOKEN + 1].copy_(token)
        token_out.copy_(token)
