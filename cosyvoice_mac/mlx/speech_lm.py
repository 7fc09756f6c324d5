"""The CosyVoice2/3 speech LM in MLX, with the PyTorch model's contract (mirrors ``models.llm.speech_lm``).

Same config (:class:`SpeechLMConfig`), same ``llm.pt``, same public methods (``generate``, ``generate_batch``,
``build_prompt_embeddings``, ``teacher_forced_logits``, ``make_sampler``, the id properties) and the
same sampler contract: each step hands the sampler the ``(V,)`` float32 log-probs as a CPU torch tensor,
so :class:`RasSampler` (and its seeded generator) is shared and the same seed gives the same tokens.

The id rules (SOS/TASK/EOS rows, stop set, min_len mask, length limits, silent ids, input checks) are
not re-written here: they are read from a PyTorch :class:`SpeechLM` built on the ``meta`` device,
which has the rules and no weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import torch

from cosyvoice_mac.mlx.batch_decoding import MlxDecodingBatch
from cosyvoice_mac.mlx.convert import load_converted, to_torch
from cosyvoice_mac.mlx.qwen2 import KVCache, Qwen2Model
from cosyvoice_mac.models.llm import Qwen2Config, RasSampler, SpeechLM, SpeechLMConfig
from cosyvoice_mac.models.llm.batch_decoding import BatchLine, generate_batch
from cosyvoice_mac.models.llm.speech_lm import UNUSED_KEYS, Sampler

KEY_MAP = ((r"^llm\.model\.model\.", "backbone."),)


class SpeechDecoder:
    """Owns one request's KV cache; ``logp`` is the next-token log-probability ``(V,)`` float32 CPU tensor.

    Each step is queued with ``mx.async_eval`` when it is built (``feed``) and read back only when
    ``logp`` is asked for, so the host can do other work (hand the last token on) while it runs.
    """

    def __init__(self, lm: "MlxSpeechLM", prompt_embeds: mx.array, max_new_tokens: int):
        self._lm = lm
        self.cache: KVCache = lm.backbone.new_cache(prompt_embeds.shape[1] + max_new_tokens)
        self._queue(lm.backbone(prompt_embeds.astype(lm.compute_dtype), self.cache))

    def _queue(self, hidden: mx.array) -> None:
        self._pending, self._logp = self._lm.next_log_probs(hidden), None
        mx.async_eval(self._pending)

    @property
    def logp(self) -> torch.Tensor:
        if self._logp is None:
            self._logp = to_torch(self._pending)  # waits for the queued step
        return self._logp

    def feed(self, token: int) -> torch.Tensor:
        """Append speech id ``token`` (one cached position) and return the new ``logp``."""
        self.feed_queued(token)
        return self.logp

    def feed_queued(self, token: int) -> None:
        """Append ``token`` and queue the step without waiting for it (``logp`` waits)."""
        embed = self._lm.speech_embedding(mx.array([[token]])).astype(self._lm.compute_dtype)
        self._queue(self._lm.backbone(embed, self.cache))


class MlxSpeechLM(nn.Module):
    """Owns the speech LM weights in MLX: ``backbone`` (``llm.model.model.*`` in ``llm.pt``),
    ``speech_embedding``, ``llm_decoder`` and (v2) ``llm_embedding``; the id rules live in ``rules``."""

    def __init__(self, config: SpeechLMConfig):
        super().__init__()
        self.config = config
        hidden, vocab = config.qwen.hidden_size, config.speech_vocab_size
        if config.spec.specials_in_llm_embedding:
            self.llm_embedding = nn.Embedding(2, hidden)
        self.backbone = Qwen2Model(config.qwen)
        self.speech_embedding = nn.Embedding(vocab, hidden)
        self.llm_decoder = nn.Linear(hidden, vocab, bias=config.spec.llm_decoder_bias)
        with torch.device("meta"):
            self._rules = SpeechLM(config)
        self.precision = "fp32"

    @classmethod
    def from_checkpoint(
        cls, path: str | Path, config: SpeechLMConfig, *, dtype: mx.Dtype | None = None, cache_dir: Path | None = None
    ) -> "MlxSpeechLM":
        """Build from ``llm.pt`` (converted once; cached as safetensors in ``cache_dir`` if given)."""
        model = cls(config)
        weights = load_converted(path, KEY_MAP, dtype=dtype, drop=UNUSED_KEYS, cache_dir=cache_dir)
        model.load_weights(list(weights.items()), strict=True)
        mx.eval(model.parameters())
        return model

    # the PyTorch model's rules -------------------------------------------------------------
    rules = property(lambda self: self._rules, doc="The PyTorch SpeechLM (meta device) that owns the id rules.")
    sos = property(lambda self: self._rules.sos)
    task_id = property(lambda self: self._rules.task_id)
    eos = property(lambda self: self._rules.eos)
    stop_ids = property(lambda self: self._rules.stop_ids)
    silent_ids = property(lambda self: self._rules.silent_ids)

    masked_before_min_len = property(lambda self: self._rules.masked_before_min_len)

    def length_limits(self, text_length: int) -> tuple[int, int]:
        return self._rules.length_limits(text_length)

    def make_sampler(self, seed: int | None = None, **kwargs) -> RasSampler:
        return self._rules.make_sampler(seed=seed, **kwargs)

    # inputs --------------------------------------------------------------------------------
    def _special(self, row: int) -> mx.array:
        table = self.llm_embedding if self.config.spec.specials_in_llm_embedding else self.speech_embedding
        return table(mx.array([[row]]))

    def build_prompt_embeddings(
        self, text_ids: torch.Tensor, prompt_text_ids: torch.Tensor, prompt_speech_ids: torch.Tensor
    ) -> mx.array:
        """(1, Lt), (1, Lp), (1, Ls) integer ids -> ``(1, 1 + Lp + Lt + 1 + Ls, D)`` input embeddings.

        The PyTorch rules check the ids (ranges, empty text, <|endofprompt|>) and raise
        :class:`SpeechLMInputError`; only the table lookups run here.
        """
        self._rules.build_prompt_embeddings(text_ids, prompt_text_ids, prompt_speech_ids)  # checks only (meta)
        ids = lambda t: mx.array(np.asarray(t.reshape(1, -1).cpu().numpy(), dtype=np.int32))  # noqa: E731
        text = self.backbone.embed_tokens(mx.concatenate([ids(prompt_text_ids), ids(text_ids)], axis=1))
        speech = self.speech_embedding(ids(prompt_speech_ids))
        return mx.concatenate([self._special(self.sos), text, self._special(self.task_id), speech], axis=1)

    # running -------------------------------------------------------------------------------
    def next_log_probs(self, hidden: mx.array) -> mx.array:
        """Final-norm hidden ``(1, T, D)`` -> log-softmax of the last position, ``(V,)`` float32, on the device."""
        logits = self.llm_decoder(hidden[0, -1]).astype(mx.float32)
        return logits - mx.logsumexp(logits, axis=-1, keepdims=True)

    def next_logp(self, hidden: mx.array) -> torch.Tensor:
        """As :meth:`next_log_probs`, read back as a ``(V,)`` float32 CPU tensor."""
        return to_torch(self.next_log_probs(hidden))

    def teacher_forced_logits(self, embeds) -> torch.Tensor:
        """``(1, L, D)`` input embeddings (torch or MLX) -> ``(1, L, V)`` logits, one causal pass (CPU tensor)."""
        embeds = embeds if isinstance(embeds, mx.array) else mx.array(embeds.float().cpu().numpy())
        return to_torch(self.llm_decoder(self.backbone(embeds.astype(self.compute_dtype))).astype(mx.float32))

    @property
    def compute_dtype(self) -> mx.Dtype:
        """What the transformer computes in: its norms' dtype (a quantized layer keeps it in its scales; the
        text table may be stored narrower, and its rows are cast to this)."""
        return self.backbone.norm.weight.dtype

    def start_decoding(self, prompt_embeds: mx.array, max_new_tokens: int) -> SpeechDecoder:
        return SpeechDecoder(self, prompt_embeds, max_new_tokens)

    def generate(
        self,
        text_ids: torch.Tensor,
        prompt_text_ids: torch.Tensor,
        prompt_speech_ids: torch.Tensor,
        sampler: Sampler,
        *,
        on_step: Callable[[int, torch.Tensor], None] | None = None,
    ) -> Iterator[int]:
        """Yield speech ids as they are decoded (the stop id is not yielded); inputs are checked now.

        ``on_step(step, logp)`` sees the ``(V,)`` CPU log-probs handed to ``sampler`` (masked ids -inf).
        """
        embeds = self.build_prompt_embeddings(text_ids, prompt_text_ids, prompt_speech_ids)
        mx.eval(embeds)  # materialised here: the decoding may run on another thread, with its own MLX stream
        min_len, max_len = self.length_limits(text_ids.shape[-1])
        return self._decode(embeds, min_len, max_len, sampler, on_step)

    # batches -------------------------------------------------------------------------------
    def batch_line(
        self, text_ids: torch.Tensor, prompt_text_ids: torch.Tensor, prompt_speech_ids: torch.Tensor, sampler: Sampler
    ) -> BatchLine:
        """One line of a batch for ``models.llm.decode_batch``, its inputs checked as :meth:`generate` checks them
        (a bad line raises :class:`SpeechLMInputError` here, before it joins a batch)."""
        embeds = self.build_prompt_embeddings(text_ids, prompt_text_ids, prompt_speech_ids)
        mx.eval(embeds)
        min_len, max_len = self.length_limits(text_ids.shape[-1])
        return BatchLine(embeds, min_len, max_len, sampler)

    def start_batch(self, lines: Sequence[BatchLine]) -> MlxDecodingBatch:
        """The decoding state of ``lines`` (each prefilled alone) for ``models.llm.decode_batch``."""
        return MlxDecodingBatch(self, lines)

    def generate_batch(self, lines: Sequence[tuple], samplers: Sequence[Sampler]) -> list[list[int]]:
        """Each line's speech ids, decoded together: what :meth:`generate` gives each alone with its sampler."""
        return generate_batch(self, lines, samplers)

    def _decode(self, embeds, min_len: int, max_len: int, sampler: Sampler, on_step) -> Iterator[int]:
        """The PyTorch model's loop (``SpeechLM._decode_on_host``: min_len mask, sampler, stop set, the same tokens for
        the same seed) in MLX's manner: the next step is queued before the token is yielded, so the device
        computes it while the consumer handles the token. The sampler stays on the host: its contract (the
        seeded RAS sampler, ``on_step``) is a ``(V,)`` CPU tensor; the log-softmax runs on the device."""
        if max_len <= 0:
            return
        decoder = self.start_decoding(embeds, max_len)
        history: list[int] = []
        vocab, stop_ids = self.config.speech_vocab_size, self._stop_ids
        masked = torch.tensor(self._masked_before_min_len, dtype=torch.long)
        for step in range(max_len):
            logp = decoder.logp
            ignore = self._masked_before_min_len if step < min_len else ()
            if ignore:
                logp.index_fill_(0, masked, float("-inf"))
            if on_step is not None:
                on_step(step, logp)
            token = int(sampler(logp, history, ignore))
            if not 0 <= token < vocab:
                raise RuntimeError(f"the sampler returned id {token}, outside the speech vocabulary 0..{vocab - 1}")
            if token in stop_ids:
                return
            history.append(token)
            if step + 1 < max_len:
                decoder.feed_queued(token)  # runs while the token is handed on
            yield token

    _stop_ids = property(lambda self: self._rules.stop_ids)
    _masked_before_min_len = property(lambda self: self._rules.masked_before_min_len)


def load_mlx_speech_lm(
    model_dir: str | Path,
    llm_node: dict,
    *,
    dtype: mx.Dtype | None = None,
    mask_all_stop_ids_before_min_len: bool = True,
    cache_dir: Path | None = None,
) -> MlxSpeechLM:
    """``<model_dir>/llm.pt`` + ``CosyVoice-BlankEN/config.json`` + the yaml ``llm:`` node -> MlxSpeechLM."""
    model_dir = Path(model_dir)
    qwen = Qwen2Config.from_json(model_dir / "CosyVoice-BlankEN" / "config.json")
    config = SpeechLMConfig.from_yaml(llm_node, qwen, mask_all_stop_ids_before_min_len=mask_all_stop_ids_before_min_len)
    return MlxSpeechLM.from_checkpoint(model_dir / "llm.pt", config, dtype=dtype, cache_dir=cache_dir)
