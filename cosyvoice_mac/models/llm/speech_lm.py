"""The CosyVoice2 (``Qwen2LM``) / CosyVoice3 (``CosyVoice3LM``) speech language model.

Input sequence ``[SOS] [text embeds of prompt_text ‖ text] [TASK_ID] [prompt speech embeds]``
(spec §5.1); autoregressive decoding with a static KV cache (§5.3); the sampler picks each id
(§5.4); any id of the stop set ends decoding and is not emitted. The Qwen ``lm_head`` in
``llm.pt`` is tied to ``embed_tokens`` and never used, so it is not built.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol, Sequence

import torch
from torch import nn

from cosyvoice_mac.checkpoint import load_checkpoint, load_strict
from cosyvoice_mac.config import ConfigError, require, tag_name
from cosyvoice_mac.models.llm.batch_decoding import BatchLine, DecodingBatch, FixedRowsBatch, generate_batch
from cosyvoice_mac.models.llm.decoding import DecodeOptions, DecodeRunner
from cosyvoice_mac.models.llm.qwen2 import Qwen2Config, Qwen2Model
from cosyvoice_mac.models.llm.sampling import RasSampler
from cosyvoice_mac.versions import VersionSpec, spec_for_class

ENDOFPROMPT_ID = 151646  # <|endofprompt|>; upstream hard-codes it and asserts it for v3
MAX_SILENT_RUN = 5
UNUSED_KEYS = ("llm.model.lm_head.weight",)  # tied to embed_tokens, never used at inference


class SpeechLMInputError(ValueError):
    """Token ids the speech LM cannot use (empty text, missing <|endofprompt|>, ids out of range)."""


class Sampler(Protocol):
    def __call__(self, logp: torch.Tensor, history: Sequence[int], ignore_ids: Sequence[int]) -> int: ...


@dataclass
class SpeechLMConfig:
    """Everything the speech LM needs from the yaml ``llm:`` node and the BlankEN config.json.

    ``spec`` is the version's row of :mod:`cosyvoice_mac.versions` (picked by the node's class): the id
    layout, the stop ids, the silent ids, the decoder bias and whether <|endofprompt|> is required.
    """

    spec: VersionSpec
    speech_token_size: int  # S: real speech tokens are 0..S-1
    qwen: Qwen2Config
    top_p: float = 0.8
    top_k: int = 25
    win_size: int = 10
    tau_r: float = 0.1
    min_token_text_ratio: float = 2.0
    max_token_text_ratio: float = 20.0
    # Upstream masks only id S while step < min_len. In v2 S is EOS, but in v3 S is SOS, so v3's
    # EOS (S+1) and the other 198 stop ids stay possible and a request can end after 0 tokens
    # (spec §5.4, upstream PR #1916). True (our default) masks every stop id before min_len in
    # both versions: "at least min_len tokens" is what min_len means. False reproduces the
    # reference exactly and is what the parity tests use.
    mask_all_stop_ids_before_min_len: bool = True

    @property
    def speech_vocab_size(self) -> int:
        return self.spec.speech_vocab_size(self.speech_token_size)

    @classmethod
    def from_yaml(
        cls, llm_node: dict, qwen: Qwen2Config, *, mask_all_stop_ids_before_min_len: bool = True
    ) -> SpeechLMConfig:
        spec = spec_for_class(tag_name(llm_node), "llm")
        for key in ("llm_input_size", "llm_output_size"):
            size = require(llm_node, key, "llm")
            if int(size) != qwen.hidden_size:
                raise ConfigError(f"llm.{key} is {size} but the Qwen2 config.json has hidden_size {qwen.hidden_size}")
        sampling = require(llm_node, "sampling", "llm")
        if not isinstance(sampling, dict) or tag_name(sampling) != "ras_sampling":
            raise ConfigError(f"llm.sampling must be ras_sampling, got {sampling!r}")
        return cls(
            spec=spec,
            speech_token_size=int(require(llm_node, "speech_token_size", "llm")),
            qwen=qwen,
            top_p=float(sampling.get("top_p", 0.8)),
            top_k=int(sampling.get("top_k", 25)),
            win_size=int(sampling.get("win_size", 10)),
            tau_r=float(sampling.get("tau_r", 0.1)),
            mask_all_stop_ids_before_min_len=mask_all_stop_ids_before_min_len,
        )


class _Scope(nn.Module):
    """Holds one child under the attribute name upstream's wrappers use (only shapes the state-dict keys)."""

    def __init__(self, name: str, child: nn.Module):
        super().__init__()
        self.add_module(name, child)


class SpeechDecoder:
    """Owns one request's decoding position; ``logp`` is the next-token log-probability (V,) float32 on the CPU.

    The KV cache comes from the model's :class:`DecodeRunner` (a fresh one, or on CUDA the one
    its graphs replay over); only the newest decoder of a model may ``feed``.
    """

    def __init__(self, lm: SpeechLM, prompt_embeds: torch.Tensor, max_new_tokens: int):
        self._runner = lm.decoding
        self.cache, self._ticket = self._runner.start(prompt_embeds.shape[1] + max_new_tokens)
        self.logp = lm._next_logp(lm.backbone(prompt_embeds, self.cache))

    @torch.inference_mode()
    def feed(self, token: int) -> torch.Tensor:
        """Append speech id ``token`` (one position, cached) and return the new ``logp``."""
        self.logp = self._runner.step(self.cache, self._ticket, token).cpu()
        return self.logp


class SpeechLM(nn.Module):
    """Owns the speech LM weights: Qwen2 backbone (``llm.model.model.*``), ``speech_embedding``,
    ``llm_decoder`` and (v2) ``llm_embedding`` holding SOS/TASK_ID; keys equal ``llm.pt``'s."""

    def __init__(self, config: SpeechLMConfig):
        super().__init__()
        self.config = config
        spec, size = config.spec, config.speech_token_size
        hidden, vocab = config.qwen.hidden_size, config.speech_vocab_size
        if spec.specials_in_llm_embedding:
            self.llm_embedding = nn.Embedding(2, hidden)
        self.llm = _Scope("model", _Scope("model", Qwen2Model(config.qwen)))
        self.speech_embedding = nn.Embedding(vocab, hidden)
        self.llm_decoder = nn.Linear(hidden, vocab, bias=spec.llm_decoder_bias)
        self._stop_ids = spec.stop_ids(size)
        self.sos, self.task_id, self.eos = spec.sos(size), spec.task_id(size), spec.eos(size)
        masked = sorted(self._stop_ids) if config.mask_all_stop_ids_before_min_len else [size]
        self._masked_before_min_len = tuple(masked)
        self.decoding = DecodeRunner(self, DecodeOptions())

    @classmethod
    def from_checkpoint(cls, path: str | Path, config: SpeechLMConfig, *, dtype: torch.dtype | None = None) -> SpeechLM:
        """Build from ``llm.pt`` (CPU tensors, ``dtype`` or fp32), ready for inference."""
        state = load_checkpoint(path)
        model = cls(config)
        if dtype is not None:
            model.to(dtype)  # before loading: the copy converts, so no second full-size copy
        load_strict(model, state, source=str(path), ignore=UNUSED_KEYS)
        return model.eval().requires_grad_(False)

    # ids ------------------------------------------------------------------------------------
    @property
    def backbone(self) -> Qwen2Model:
        return self.llm.model.model

    @property
    def stop_ids(self) -> frozenset[int]:
        """Sampled ids that end decoding: {S, S+1, S+2} (v2) or every id >= S (v3)."""
        return self._stop_ids

    @property
    def masked_before_min_len(self) -> tuple[int, ...]:
        """Ids the sampler must not pick while ``step < min_len`` (see SpeechLMConfig)."""
        return self._masked_before_min_len

    @property
    def silent_ids(self) -> tuple[int, ...]:
        """Silence/breath speech ids whose long runs the post-filter drops (the spec's; v2 has none)."""
        return self.config.spec.silent_ids

    def length_limits(self, text_length: int) -> tuple[int, int]:
        """(min_len, max_len) speech tokens for ``text_length`` ids of text to speak (prompt text excluded)."""
        config = self.config
        return int(text_length * config.min_token_text_ratio), int(text_length * config.max_token_text_ratio)

    def make_sampler(self, seed: int | None = None, **overrides) -> RasSampler:
        """The config's repetition-aware sampler with its own generator seeded by ``seed``; ``overrides`` (a
        request's ``top_p``, ``top_k``, ``win_size``, ``temperature``, or a test's ``draw``) replace the config's."""
        c = self.config
        settings = {"top_p": c.top_p, "top_k": c.top_k, "win_size": c.win_size, "tau_r": c.tau_r, **overrides}
        return RasSampler(seed=seed, **settings)

    # inputs ---------------------------------------------------------------------------------
    def _ids(self, ids: torch.Tensor, name: str, upper: int, what: str) -> torch.Tensor:
        """Validated (1, L) long copy of ``ids`` on this module's device."""
        if not isinstance(ids, torch.Tensor) or ids.dtype.is_floating_point or ids.dtype.is_complex:
            got = f"a {ids.dtype} tensor" if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise SpeechLMInputError(f"{name} must be an integer tensor of {what} ids, got {got}")
        if ids.dim() == 1:
            ids = ids[None]
        if ids.dim() != 2 or ids.shape[0] != 1:
            raise SpeechLMInputError(f"{name} must have shape (1, L), got {tuple(ids.shape)}")
        if ids.numel() and ids.device.type != "meta":
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= upper:
                bad = low if low < 0 else high
                raise SpeechLMInputError(f"{name} holds id {bad}, outside the {what} range 0..{upper - 1}")
        return ids.to(device=self.speech_embedding.weight.device, dtype=torch.long)

    def _special(self, row: int) -> torch.Tensor:
        table = self.llm_embedding if self.config.spec.specials_in_llm_embedding else self.speech_embedding
        return table.weight[row].view(1, 1, -1)

    @torch.inference_mode()
    def build_prompt_embeddings(
        self, text_ids: torch.Tensor, prompt_text_ids: torch.Tensor, prompt_speech_ids: torch.Tensor
    ) -> torch.Tensor:
        """(1, Lt), (1, Lp), (1, Ls) ids -> (1, 1 + Lp + Lt + 1 + Ls, D) LM input embeddings."""
        text_vocab = self.config.qwen.vocab_size
        text = self._ids(text_ids, "text_ids", text_vocab, "text token")
        prompt_text = self._ids(prompt_text_ids, "prompt_text_ids", text_vocab, "text token")
        prompt_speech = self._ids(prompt_speech_ids, "prompt_speech_ids", self.config.speech_token_size, "speech token")
        if text.shape[1] == 0:
            raise SpeechLMInputError("text_ids is empty: there is no text to speak")
        readable = all(t.device.type != "meta" for t in (prompt_text_ids, text_ids))
        if self.config.spec.needs_endofprompt and readable:
            if not any(bool((t == ENDOFPROMPT_ID).any()) for t in (prompt_text_ids, text_ids)):
                raise SpeechLMInputError(
                    f"CosyVoice3 needs the <|endofprompt|> token (id {ENDOFPROMPT_ID}) in the prompt text or "
                    "the text; put '<|endofprompt|>' after the system/instruction prompt "
                    "(e.g. 'You are a helpful assistant.<|endofprompt|>')"
                )
        text_embeds = self.backbone.embed_tokens(torch.cat((prompt_text, text), dim=1))
        speech_embeds = self.speech_embedding(prompt_speech)
        return torch.cat((self._special(self.sos), text_embeds, self._special(self.task_id), speech_embeds), dim=1)

    # running --------------------------------------------------------------------------------
    def _next_logp(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden (1, T, D) -> log-softmax of the last position, (V,) float32 on the CPU."""
        return self.llm_decoder(hidden[0, -1]).float().log_softmax(dim=-1).cpu()

    @torch.inference_mode()
    def teacher_forced_logits(self, embeds: torch.Tensor) -> torch.Tensor:
        """(1, L, D) input embeddings -> (1, L, V) decoder logits, one causal forward pass."""
        weight = self.speech_embedding.weight
        return self.llm_decoder(self.backbone(embeds.to(device=weight.device, dtype=weight.dtype)))

    @torch.inference_mode()
    def start_decoding(self, prompt_embeds: torch.Tensor, max_new_tokens: int) -> SpeechDecoder:
        """Run the prefix once into a cache sized for ``max_new_tokens`` more positions."""
        weight = self.speech_embedding.weight
        return SpeechDecoder(self, prompt_embeds.to(device=weight.device, dtype=weight.dtype), max_new_tokens)

    @torch.inference_mode()
    def generate(
        self,
        text_ids: torch.Tensor,
        prompt_text_ids: torch.Tensor,
        prompt_speech_ids: torch.Tensor,
        sampler: Sampler,
        *,
        on_step: Callable[[int, torch.Tensor], None] | None = None,
    ) -> Iterator[int]:
        """Yield speech ids as they are decoded; the stop id is not yielded.

        Inputs are checked now (errors are raised by this call, not by the first ``next``).
        ``on_step(step, logp)`` sees the (V,) CPU log-probs handed to ``sampler`` (masked ids -inf).
        """
        embeds = self.build_prompt_embeddings(text_ids, prompt_text_ids, prompt_speech_ids)
        min_len, max_len = self.length_limits(text_ids.shape[-1])
        return self._decode(embeds, min_len, max_len, sampler, on_step)

    @torch.inference_mode()
    def batch_line(
        self, text_ids: torch.Tensor, prompt_text_ids: torch.Tensor, prompt_speech_ids: torch.Tensor, sampler: Sampler
    ) -> BatchLine:
        """One line of a batch for :func:`decode_batch`, its inputs checked as :meth:`generate` checks them
        (a bad line raises :class:`SpeechLMInputError` here, before it joins a batch)."""
        weight = self.speech_embedding.weight
        embeds = self.build_prompt_embeddings(text_ids, prompt_text_ids, prompt_speech_ids)
        min_len, max_len = self.length_limits(text_ids.shape[-1])
        return BatchLine(embeds.to(device=weight.device, dtype=weight.dtype), min_len, max_len, sampler)

    def start_batch(self, lines: Sequence[BatchLine]) -> DecodingBatch:
        """The decoding state of ``lines`` (each prefilled alone) for :func:`decode_batch`: in CUDA graphs mode its
        step is one CUDA graph replayed per token (``DecodeRunner.batch_step_runner``), elsewhere eager."""
        runner = self.decoding.batch_step_runner()
        return DecodingBatch(self, lines) if runner is None else FixedRowsBatch(self, lines, runner)

    def generate_batch(
        self, lines: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], samplers: Sequence[Sampler]
    ) -> list[list[int]]:
        """Each line's speech ids, decoded together: what :meth:`generate` gives each alone with its sampler
        (``batch_decoding.generate_batch``)."""
        return generate_batch(self, lines, samplers)

    @torch.inference_mode()
    def _decode(self, embeds, min_len: int, max_len: int, sampler: Sampler, on_step) -> Iterator[int]:
        if max_len <= 0:
            return
        if self.decoding.samples_on_device(sampler, on_step):  # CUDA graphs: the sampler inside the step's graph
            weight = self.speech_embedding.weight
            embeds = embeds.to(device=weight.device, dtype=weight.dtype)
            yield from self.decoding.sampled_tokens(embeds, min_len, max_len, sampler, self._stop_ids)
            return
        yield from self._decode_on_host(embeds, min_len, max_len, sampler, on_step)

    @torch.inference_mode()
    def _decode_on_host(self, embeds, min_len: int, max_len: int, sampler: Sampler, on_step) -> Iterator[int]:
        """The host's loop: the sampler sees each step's (V,) CPU log-probs. It reads only ``start_decoding``,
        ``config`` and the stop rules, so another engine's model can run it too (the MLX loop's reference)."""
        decoder = self.start_decoding(embeds, max_len)
        history: list[int] = []
        vocab, stop_ids = self.config.speech_vocab_size, self._stop_ids
        masked = torch.tensor(self._masked_before_min_len, dtype=torch.long, device=decoder.logp.device)
        for step in range(max_len):
            logp = decoder.logp
            ignore: Sequence[int] = ()
            if step < min_len:
                ignore = self._masked_before_min_len
                logp.index_fill_(0, masked, float("-inf"))
            if on_step is not None:
                on_step(step, logp)
            token = int(sampler(logp, history, ignore))
            if not 0 <= token < vocab:
                raise RuntimeError(f"the sampler returned id {token}, outside the speech vocabulary 0..{vocab - 1}")
            if token in stop_ids:
                return
            yield token
            history.append(token)
            if step + 1 < max_len:
                decoder.feed(token)


def load_speech_lm(
    model_dir: str | Path,
    llm_node: dict,
    *,
    dtype: torch.dtype | None = None,
    mask_all_stop_ids_before_min_len: bool = True,
) -> SpeechLM:
    """``<model_dir>/llm.pt`` + ``CosyVoice-BlankEN/config.json`` + the yaml ``llm:`` node -> SpeechLM (eval)."""
    model_dir = Path(model_dir)
    qwen = Qwen2Config.from_json(model_dir / "CosyVoice-BlankEN" / "config.json")
    config = SpeechLMConfig.from_yaml(llm_node, qwen, mask_all_stop_ids_before_min_len=mask_all_stop_ids_before_min_len)
    return SpeechLM.from_checkpoint(model_dir / "llm.pt", config, dtype=dtype)


def filter_silent_runs(
    tokens: Iterable[int], silent_ids: Iterable[int], max_run: int = MAX_SILENT_RUN
) -> Iterator[int]:
    """Yield ``tokens`` but drop silent ids once more than ``max_run`` of them came in a row (v3 post-filter)."""
    silent = frozenset(silent_ids)
    run = 0
    for token in tokens:
        if token in silent:
            run += 1
            if run > max_run:
                continue
        else:
            run = 0
        yield token


def drop_long_silent_runs(tokens: Iterable[int], silent_ids: Iterable[int], max_run: int = MAX_SILENT_RUN) -> list[int]:
    """List form of :func:`filter_silent_runs`."""
    return list(filter_silent_runs(tokens, silent_ids, max_run))
