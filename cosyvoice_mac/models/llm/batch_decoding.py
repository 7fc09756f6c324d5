"""Decoding several lines at once: one step feeds B sequences through the speech LM, each with its own sampler.

A decoding step reads every weight of the LM once whatever the batch, so on a memory-bound device (a CPU, a
GPU at batch 1, a Mac's unified memory) B lines cost little more than one. Each line keeps what makes its
tokens its own: its prompt is run alone (the prefill is the solo prefill, so its first log-probabilities are
bit-identical), its sampler owns its random generator (the same seed draws the same ids in a batch as alone),
and it stops on its own stop id or length limit, leaving the batch between steps.

Ragged prompts are *left*-padded in one KV cache ``(layers, 2, B, KVH, capacity, head_dim)``: row ``i``'s
prompt fills slots ``pad_i .. longest - 1``, so every row writes the same slot each step (one ``index_copy_`` a
layer, as alone) while its RoPE position is its own (``slot - pad_i``), and the slots before ``pad_i`` are
masked out of its attention. The step runs eagerly on whatever device the weights are on (CPU, CUDA, MPS).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Sequence

import torch

from cosyvoice_mac.models.llm.decode_step import LayerPlan, StepPlan, projection
from cosyvoice_mac.models.llm.kv_cache import StaticKVCache, apply_rope
from cosyvoice_mac.models.llm.sampling import sample_rows
from cosyvoice_mac.models.llm.step_kernels import FEW_ROWS_ON_CPU, PLAIN

if TYPE_CHECKING:
    from cosyvoice_mac.models.llm.speech_lm import Sampler, SpeechLM


class BatchLine(NamedTuple):
    """One line of a batch: its LM input embeddings ``(1, L, D)`` on the model's device and dtype (an MLX array for
    the MLX LM), its (min_len, max_len) speech tokens and its own sampler."""

    embeds: torch.Tensor
    min_len: int
    max_len: int
    sampler: Sampler


def left_padded_key_bias(pads: torch.Tensor, capacity: int, dtype: torch.dtype) -> torch.Tensor:
    """``(B, 1, 1, capacity)`` additive attention bias: -inf on row ``i``'s first ``pads[i]`` slots (its padding)."""
    slots = torch.arange(capacity, device=pads.device)
    padding = (slots[None, :] < pads[:, None])[:, None, None, :]
    return torch.zeros(padding.shape, device=pads.device, dtype=dtype).masked_fill_(padding, float("-inf"))


def decode_layer_batch(plan: LayerPlan, x, rows, slot, layer: int, cache: StaticKVCache, span: int, bias):
    """One position of each of B sequences, x ``(B, D)``, through one layer -> ``(B, D)``.

    The batched twin of ``decode_step.decode_layer``: ``rows`` are each sequence's RoPE (cos, sin) ``(B, 1,
    head_dim)``; every sequence writes cache ``slot`` (a ``(1,)`` long tensor) and attends to slots
    ``0..span-1``, ``bias`` ``(B, 1, 1, span)`` masking its padding (None: no row is padded).
    """
    batch, heads, kv_heads, head_dim = x.shape[0], plan.heads, plan.kv_heads, plan.head_dim
    qkv = plan.qkv_proj(plan.norm(x, plan.input_norm)).view(batch, -1, head_dim)
    apply_rope(qkv.narrow(1, 0, heads + kv_heads), *rows)
    new_kv = qkv.narrow(1, heads, 2 * kv_heads).reshape(batch, 2, kv_heads, 1, head_dim).transpose(0, 1)
    cache.store(layer, slot, new_kv)
    keys, values = cache.span(layer, span)
    queries = qkv.narrow(1, 0, heads).view(batch, kv_heads, -1, head_dim)
    attended = plan.attend(queries, keys, values, bias)
    x = plan.o_proj(attended.reshape(batch, -1), x)
    return plan.down_proj(plan.silu_mul(plan.gate_up_proj(plan.norm(x, plan.post_norm))), x)


class DecodingBatch:
    """Owns the decoding state of the lines still running: their shared cache, RoPE positions and padding bias."""

    def __init__(self, lm: SpeechLM, lines: Sequence[BatchLine]):
        self.lm = lm
        backbone = lm.backbone
        lengths = [line.embeds.shape[1] for line in lines]
        longest = max(lengths)
        self.cache = backbone.new_cache(longest + max(line.max_len for line in lines), batch_size=len(lines))
        padding = [longest - length for length in lengths]
        pads = torch.tensor(padding, dtype=torch.long, device=self.cache.kv.device)
        self.first_logp = [self._prefill(row, line.embeds, padding[row]) for row, line in enumerate(lines)]
        self.cache.length = longest
        self.positions = longest - pads  # each row's next RoPE position: its own prompt length
        self.bias = left_padded_key_bias(pads, self.cache.capacity, self.cache.kv.dtype) if any(padding) else None
        # a CPU streams each weight once for all rows only when the product is written weight @ x.T (step_kernels)
        kernels = FEW_ROWS_ON_CPU if self.cache.kv.device.type == "cpu" else PLAIN
        self.plan: StepPlan = backbone.step_plan(kernels=kernels)
        self.head = projection(lm.llm_decoder, kernels)

    def _prefill(self, row: int, embeds: torch.Tensor, pad: int) -> torch.Tensor:
        """Run line ``row``'s prompt alone (as a solo request does) and copy its keys and values behind its padding."""
        length = embeds.shape[1]
        solo = self.lm.backbone.new_cache(length)
        hidden = self.lm.backbone(embeds, solo)
        self.cache.kv[:, :, row, :, pad : pad + length].copy_(solo.kv[:, :, 0])
        return self.lm._next_logp(hidden)

    def keep(self, rows: list[int]) -> None:
        """Keep only batch rows ``rows`` (the lines still decoding)."""
        index = torch.tensor(rows, dtype=torch.long, device=self.cache.kv.device)
        self.cache.keep_rows(index)
        self.positions = self.positions.index_select(0, index)
        if self.bias is not None:
            self.bias = self.bias.index_select(0, index)

    def step(self, tokens: list[int]) -> torch.Tensor:
        """Feed one speech id per row; the rows' next (rows, V) float32 log-probabilities on the CPU."""
        backbone, cache = self.lm.backbone, self.cache
        cache.check_room(1)
        weight = self.lm.speech_embedding.weight
        # a fresh (B, D) tensor: the layers add into it in place
        hidden = weight[torch.tensor(tokens, dtype=torch.long, device=weight.device)]
        rows = backbone.rotary.table.index_select(0, self.positions).unbind(1)
        slot, span = cache.slots.narrow(0, cache.length, 1), cache.length + 1
        bias = None if self.bias is None else self.bias[..., :span]
        for index, layer_plan in enumerate(self.plan.layers):
            hidden = decode_layer_batch(layer_plan, hidden, rows, slot, index, cache, span, bias)
        cache.length += 1
        self.positions = self.positions + 1
        return PLAIN.log_softmax(self.head(self.plan.norm(hidden, backbone.norm.weight))).cpu()


class FixedRowsBatch(DecodingBatch):
    """The batch as fixed addresses, what a CUDA graph replays: every step reads its tokens, RoPE positions and
    slot from tensors that stay put and writes its log-probabilities to one, and attends over the cache's whole
    capacity with the slots not yet written masked (as the solo graphs mask a bucket's). A line that leaves keeps its
    row, fed id 0 and ignored, until half the rows have left: then the rows still decoding are copied into a smaller
    cache (``DecodingBatch.keep``) and the step is captured again, so a ragged batch captures about log2(B) times.

    ``run_step(step, device)`` makes what runs ``step`` (a function of no arguments) on the cache's device:
    ``models/cuda/batch_graph.BatchStepGraph`` captures it after its first eager run and replays it; without one the
    step is called as it is (the same step without a graph: the tests on a CPU)."""

    def __init__(self, lm: SpeechLM, lines: Sequence[BatchLine], run_step=None):
        super().__init__(lm, lines)
        self._make_runner = run_step or (lambda step, device: step)
        self.alive = list(range(len(lines)))  # the physical row of each line still decoding, in decode_batch's order
        device = self.cache.kv.device
        self.pads = (self.cache.length - self.positions).contiguous()
        self.positions = self.positions.clone()
        self.slot = torch.full((1,), self.cache.length, dtype=torch.long, device=device)
        self._fresh_rows()

    def _fresh_rows(self) -> None:
        """The static inputs and output of a step over the cache's current rows, and a runner that captures anew."""
        device, rows = self.cache.kv.device, self.cache.batch_size
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)
        self.logp = torch.empty(rows, self.lm.config.speech_vocab_size, device=device)
        self.run = self._make_runner(self._fixed_step, device)

    def keep(self, rows: list[int]) -> None:
        self.alive = [self.alive[row] for row in rows]
        if len(self.alive) > self.cache.batch_size // 2:
            return
        index = torch.tensor(self.alive, dtype=torch.long, device=self.cache.kv.device)
        self.cache.keep_rows(index)
        self.positions = self.positions.index_select(0, index)
        self.pads = self.pads.index_select(0, index)
        self.alive = list(range(len(self.alive)))
        self._fresh_rows()

    def _fixed_step(self) -> None:
        """One step of every row from the fixed inputs into ``self.logp`` (what the graph holds)."""
        backbone, cache = self.lm.backbone, self.cache
        hidden = self.lm.speech_embedding.weight.index_select(0, self.tokens)  # a fresh (B, D): layers add into it
        rows = backbone.rotary.table.index_select(0, self.positions).unbind(1)
        slots = cache.slots
        written = (slots[None, :] >= self.pads[:, None]) & (slots[None, :] <= self.slot)
        bias = torch.zeros(written.shape, device=slots.device, dtype=cache.kv.dtype)
        bias = bias.masked_fill_(~written, float("-inf"))[:, None, None, :]
        for index, layer_plan in enumerate(self.plan.layers):
            hidden = decode_layer_batch(layer_plan, hidden, rows, self.slot, index, cache, cache.capacity, bias)
        self.logp.copy_(PLAIN.log_softmax(self.head(self.plan.norm(hidden, backbone.norm.weight))))

    def step(self, tokens: list[int]) -> torch.Tensor:
        """Feed one speech id per line still decoding; their (rows, V) float32 log-probabilities on the CPU."""
        self.cache.check_room(1)
        fed = [0] * self.cache.batch_size
        for row, token in zip(self.alive, tokens):
            fed[row] = token
        self.tokens.copy_(torch.tensor(fed, dtype=torch.long))
        self.run()
        self.cache.length += 1
        self.positions.add_(1)
        self.slot.add_(1)
        host = self.logp.cpu()
        return host if len(self.alive) == host.shape[0] else host[self.alive]


@torch.inference_mode()
def decode_batch(lm, lines: Sequence[BatchLine]) -> list[list[int]]:
    """Each line's speech ids (its stop id not included), decoded together: the ids ``lm``'s solo loop gives each
    line with the same sampler state (the rules of ``SpeechLM._decode_on_host``: stop ids masked before min_len, any
    stop id ends the line, at most max_len ids). ``lm`` is a speech LM on either engine: its ``start_batch`` gives
    the batch's device state (``DecodingBatch`` here, ``mlx.batch_decoding.MlxDecodingBatch`` on MLX); this loop,
    the sampling and the stops, runs on the host for both."""
    results: list[list[int]] = [[] for _ in lines]
    active = [index for index, line in enumerate(lines) if line.max_len > 0]
    if not active:
        return results
    for line in lines:
        if len(line.embeds.shape) != 3 or line.embeds.shape[0] != 1:
            raise ValueError(f"a batch line's embeddings must be (1, L, D), got {tuple(line.embeds.shape)}")
    batch = lm.start_batch([lines[index] for index in active])
    vocab, stop_ids = lm.config.speech_vocab_size, lm.stop_ids
    masked_ids = lm.masked_before_min_len
    masked = torch.tensor(masked_ids, dtype=torch.long)
    logps, step = batch.first_logp, 0
    while active:
        rows = logps if isinstance(logps, torch.Tensor) else torch.stack(logps)  # (rows, V) on the host
        ignores: list[Sequence[int]] = []
        for row, index in enumerate(active):
            early = step < lines[index].min_len
            if early:
                rows[row].index_fill_(0, masked, float("-inf"))
            ignores.append(masked_ids if early else ())
        # one softmax and top-k for every row (the ids each sampler draws alone): sampling.sample_rows
        tokens = sample_rows([lines[index].sampler for index in active], rows, [results[i] for i in active], ignores)
        staying, fed = [], []
        for row, (index, token) in enumerate(zip(active, tokens)):
            if not 0 <= token < vocab:
                raise RuntimeError(f"the sampler returned id {token}, outside the speech vocabulary 0..{vocab - 1}")
            if token in stop_ids:
                continue
            results[index].append(token)
            if step + 1 < lines[index].max_len:
                staying.append(row)
                fed.append(token)
        if not staying:
            break
        if len(staying) < len(active):
            batch.keep(staying)
            active = [active[row] for row in staying]
        logps = batch.step(fed)
        step += 1
    return results


def generate_batch(lm, lines: Sequence[tuple], samplers: Sequence[Sampler]) -> list[list[int]]:
    """Each line's speech ids (stop id excluded), decoded together: line ``i`` is ``(text_ids, prompt_text_ids,
    prompt_speech_ids)`` as for ``lm.generate``, sampled by ``samplers[i]``, and gets the ids ``lm.generate`` gives
    it alone with the same sampler. Inputs are checked (``lm.batch_line``) before any decoding."""
    if len(lines) != len(samplers):
        raise ValueError(f"{len(lines)} lines but {len(samplers)} samplers: each line needs its own sampler")
    return decode_batch(lm, [lm.batch_line(*line, sampler) for line, sampler in zip(lines, samplers)])
