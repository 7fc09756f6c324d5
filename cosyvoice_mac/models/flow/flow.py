"""The flow: speech tokens (+ voice prompt) -> 80-bin log-mel at 50 Hz, for CosyVoice2 and CosyVoice3.

Upstream: ``cosyvoice/flow/flow.py::CausalMaskedDiffWithXvec.inference`` (v2) and
``CausalMaskedDiffWithDiT.inference`` (v3). Both share one procedure (spec section 6.1):
speaker vector -> 80-d; prompt tokens ++ tokens -> embeddings -> frame features ``mu`` at twice the
token rate; the prompt mel conditions the first frames; the CFM sampler makes the whole mel and
the prompt part is cut off. Only the token front-end and the estimator differ between versions
(``FlowConfig.front``, the ``flow_front`` of the section's row in :mod:`cosyvoice_mac.versions`):

* v3 (``CausalMaskedDiffWithDiT``): pre-look-ahead conv, each frame repeated ``token_mel_ratio`` times, DiT.
* v2 (``CausalMaskedDiffWithXvec``): upsampling conformer encoder + ``encoder_proj``, 1-D U-Net.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from cosyvoice_mac.checkpoint import load_checkpoint, load_strict
from cosyvoice_mac.config import ConfigError, require, tag_name
from cosyvoice_mac.device import is_cuda
from cosyvoice_mac.models.flow.cfm import (
    MEL_BINS,
    CFMConfig,
    ConditionalFlowMatching,
    FlowInputError,
    check_frame_count,
)
from cosyvoice_mac.models.flow.dit import DiT, DiTConfig
from cosyvoice_mac.models.flow.lookahead import PreLookaheadLayer
from cosyvoice_mac.models.flow.prefix import FlowPrefix, StepState
from cosyvoice_mac.versions import PRE_LOOKAHEAD, spec_for_class


@dataclass
class FlowConfig:
    """Everything needed to build a :class:`Flow` (yaml ``flow:``), for either model version.

    ``estimator`` is a ``DiTConfig`` (pre-look-ahead front) or a ``UNetConfig`` (conformer front); the
    pre-look-ahead front has ``lookahead_channels``, the conformer one ``encoder`` (``ConformerConfig``)
    and ``encoder_output_size``.
    """

    front: str  # versions.PRE_LOOKAHEAD or versions.CONFORMER: the version spec's flow_front
    vocab_size: int
    input_size: int  # token embedding width
    estimator: Any
    cfm: CFMConfig
    output_size: int = MEL_BINS
    spk_embed_dim: int = 192
    token_mel_ratio: int = 2
    pre_lookahead_len: int = 3
    lookahead_channels: int = 0
    encoder: Any = None
    encoder_output_size: int = 0

    @classmethod
    def from_yaml(cls, node: dict) -> "FlowConfig":
        front = spec_for_class(tag_name(node), "flow").flow_front
        decoder = require(node, "decoder", "flow")
        common = dict(
            front=front,
            vocab_size=int(require(node, "vocab_size", "flow")),
            input_size=int(require(node, "input_size", "flow")),
            output_size=int(node.get("output_size", MEL_BINS)),
            spk_embed_dim=int(node.get("spk_embed_dim", 192)),
            token_mel_ratio=int(node.get("token_mel_ratio", 2)),
            pre_lookahead_len=int(node.get("pre_lookahead_len", 3)),
            cfm=CFMConfig.from_yaml(decoder),
        )
        if common["output_size"] != MEL_BINS:
            raise ConfigError(f"flow.output_size is {common['output_size']}; the flow makes {MEL_BINS}-bin mels")
        estimator_node = require(decoder, "estimator", "flow.decoder")
        if front == PRE_LOOKAHEAD:
            lookahead = require(node, "pre_lookahead_layer", "flow")
            if int(lookahead.get("pre_lookahead_len", common["pre_lookahead_len"])) != common["pre_lookahead_len"]:
                raise ConfigError("flow.pre_lookahead_layer.pre_lookahead_len differs from flow.pre_lookahead_len")
            return cls(
                **common,
                estimator=DiTConfig.from_yaml(estimator_node),
                lookahead_channels=int(require(lookahead, "channels", "flow.pre_lookahead_layer")),
            )
        from cosyvoice_mac.models.flow.conformer import ConformerConfig
        from cosyvoice_mac.models.flow.unet import UNetConfig

        encoder_node = require(node, "encoder", "flow")
        return cls(
            **common,
            estimator=UNetConfig.from_yaml(estimator_node),
            encoder=ConformerConfig.from_yaml(encoder_node),
            encoder_output_size=int(encoder_node.get("output_size", 256)),  # upstream default
        )


class Flow(nn.Module):
    """Owns the token embedding, speaker projection, token front-end and the CFM sampler with its estimator.

    State-dict keys equal the official ``flow.pt``. The flow is deterministic (fixed start noise).
    """

    def __init__(self, config: FlowConfig):
        super().__init__()
        self.config = config
        self.input_embedding = nn.Embedding(config.vocab_size, config.input_size)
        self.spk_embed_affine_layer = nn.Linear(config.spk_embed_dim, config.output_size)
        if config.front == PRE_LOOKAHEAD:
            self.pre_lookahead_layer = PreLookaheadLayer(
                config.input_size, config.lookahead_channels, config.pre_lookahead_len
            )
            estimator = DiT(config.estimator)
        else:
            from cosyvoice_mac.models.flow.conformer import UpsampleConformerEncoder
            from cosyvoice_mac.models.flow.unet import CausalConditionalDecoder

            self.encoder = UpsampleConformerEncoder(config.encoder)
            self.encoder_proj = nn.Linear(config.encoder_output_size, config.output_size)
            estimator = CausalConditionalDecoder(config.estimator)
        self.decoder = ConditionalFlowMatching(estimator, config.cfm)
        self.shared_graphs = None  # CUDA: a new voice's prefix build and first chunk as graphs (see cuda_graphs)
        self.length_graphs = None  # CUDA: a whole non-streaming call as a graph of its length bucket (likewise)

    def _apply(self, fn, *args, **kwargs):
        for graphs in (getattr(self, "shared_graphs", None), getattr(self, "length_graphs", None)):
            if graphs is not None:  # moved or cast: the graphs would read the old weights' memory
                graphs.clear()
        return super()._apply(fn, *args, **kwargs)

    def cuda_graphs(self, device: torch.device):
        """Where ``device`` is CUDA, the module that picks the graph serving a call (``models/cuda/flow_graphs.py``),
        this flow's graph owners made if new; else None. Imported here only: the CPU, MPS and MLX never load it."""
        if not is_cuda(device):
            return None
        from cosyvoice_mac.models.cuda import flow_graphs

        flow_graphs.attach(self)
        return flow_graphs

    @classmethod
    def from_checkpoint(cls, config: FlowConfig, path: str | Path, *, hub_repo: str | None = None) -> "Flow":
        """Build from ``config`` and load ``flow.pt`` strictly; returned in eval mode on the CPU."""
        flow = cls(config)
        load_strict(flow, load_checkpoint(path, hub_repo=hub_repo), source=str(path))
        return flow.eval()

    def output_frames(self, prompt_tokens: int, tokens: int, finalize: bool) -> int:
        """Mel frames the sampler makes (prompt included) for these token counts."""
        lookahead_only = 0 if finalize else self.config.pre_lookahead_len
        return self.config.token_mel_ratio * (prompt_tokens + tokens - lookahead_only)

    def token_features(self, embedded: torch.Tensor, finalize: bool, streaming: bool) -> torch.Tensor:
        """Token embeddings ``(1, L, C)`` -> frame features ``mu (1, ratio * L', 80)``.

        When not finalising, the last ``pre_lookahead_len`` tokens are look-ahead context only (L' = L - 3).
        """
        context = None
        if not finalize:
            split = embedded.shape[1] - self.config.pre_lookahead_len
            embedded, context = embedded[:, :split], embedded[:, split:]
        if self.config.front == PRE_LOOKAHEAD:
            features = self.pre_lookahead_layer(embedded, context)
            return features.repeat_interleave(self.config.token_mel_ratio, dim=1)
        return self.encoder_proj(self.encoder(embedded, context, streaming))

    @torch.inference_mode()
    def inference(
        self,
        tokens: torch.Tensor,
        prompt_tokens: torch.Tensor,
        prompt_feat: torch.Tensor,
        embedding: torch.Tensor,
        *,
        streaming: bool = False,
        finalize: bool = True,
        prefix: FlowPrefix | None = None,
    ) -> torch.Tensor:
        """Speech tokens -> log-mel of the generated part only.

        tokens (1, N) and prompt_tokens (1, P): integer speech-token ids (negative ids count as 0, as upstream);
        prompt_feat (1, F, 80): prompt log-mel, normally F = 2P; embedding (1, 192): raw speaker vector.
        ``streaming`` uses chunk-causal attention; ``finalize=False`` treats the last 3 tokens as
        look-ahead only (intermediate streaming chunk). ``prefix`` (streaming only, from
        :meth:`build_prefix` for this prompt) skips recomputing the prompt's first chunks; the result
        is the same. Returns mel ``(1, 80, T - F)`` fp32 on the module's device, ``T = 2 (P + N)``
        (``2 (P + N - 3)`` when not finalising).
        """
        self._check_inputs(tokens, prompt_tokens, prompt_feat, embedding, finalize)
        if prefix is not None:
            self._check_prefix(prefix, prompt_tokens, embedding, streaming)
        start = 0 if prefix is None else prefix.frames
        speaker, mu, mask, cond = self._sampler_inputs(
            tokens, prompt_tokens, prompt_feat, embedding, finalize, streaming, start
        )
        prompt_frames, graphs = prompt_feat.shape[1], self.cuda_graphs(mu.device)
        mel = None if graphs is None else graphs.sample(self, mu, mask, speaker, cond, streaming, prefix)
        if mel is None:  # no graph serves it (or not on CUDA)
            mel = self.decoder(mu, mask, speaker, cond, streaming, None if prefix is None else prefix.steps)
        return mel[:, :, prompt_frames - start :].float()

    @torch.inference_mode()
    def inference_batch(
        self, lines: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]
    ) -> list[torch.Tensor]:
        """Several whole (non-streamed) lines in one sampler run: line ``i`` is ``(tokens, prompt_tokens,
        prompt_feat, embedding)`` as for :meth:`inference`, and gets its mel ``(1, 80, T_i - F_i)``.

        Each line's token front-end runs alone (its convolutions and conformer see no padding); the Euler steps
        run on the lines padded at their end to the longest, the padding masked (both estimators attend only to
        valid keys and their convolutions are causal), so each mel equals the line's :meth:`inference` up to
        the kernels' rounding. The start noise is the fixed buffer's first frames for every line, as alone.
        """
        inputs = []
        for tokens, prompt_tokens, prompt_feat, embedding in lines:
            self._check_inputs(tokens, prompt_tokens, prompt_feat, embedding, True)
            inputs.append(self._sampler_inputs(tokens, prompt_tokens, prompt_feat, embedding, True, False, 0))
        longest = max(mu.shape[-1] for _, mu, _, _ in inputs)
        pad = lambda z: F.pad(z, (0, longest - z.shape[-1]))  # noqa: E731
        speaker = torch.cat([spk for spk, _, _, _ in inputs])
        mu, mask, cond = (torch.cat([pad(line[part]) for line in inputs]) for part in (1, 2, 3))
        mel = self.decoder(mu, mask, speaker, cond, False, None)
        frames = [line[1].shape[-1] for line in inputs]
        return [mel[i : i + 1, :, line[2].shape[1] : frames[i]].float() for i, line in enumerate(lines)]

    @torch.inference_mode()
    def first_chunk_recording_prefix(self, tokens, prompt_tokens, prompt_feat, embedding, prefix_tokens: int):
        """A streamed chunk with no cached prefix (``finalize=False``; shapes as :meth:`inference`) that records the
        voice's prefix of its first ``prefix_tokens`` prompt tokens on the way: (mel ``(1, 80, T - F)``, FlowPrefix).

        On a CPU the estimator's time is mostly per call, not per frame (bench/README.md): one call over the
        prompt and the chunk costs about what the chunk alone costs through a prefix, so a new voice no longer
        pays a separate build before its first audio. The mel and the prefix equal :meth:`inference` and
        :meth:`build_prefix` (chunk-causal attention and causal convolutions: later frames never reach them).
        """
        prefix_frames = self._check_prefix_request(prompt_tokens, prompt_feat, embedding, prefix_tokens)
        self._check_inputs(tokens, prompt_tokens, prompt_feat, embedding, finalize=False)
        speaker, mu, mask, cond = self._sampler_inputs(tokens, prompt_tokens, prompt_feat, embedding, False, True, 0)
        steps = [StepState(keep=prefix_frames) for _ in range(self.decoder.config.n_timesteps)]
        mel = self.decoder(mu, mask, speaker, cond, True, steps)
        prefix = FlowPrefix(
            tokens=prefix_tokens,
            frames=prefix_frames,
            steps=steps,
            prompt_tokens=prompt_tokens[:, :prefix_tokens].clone(),
            embedding=embedding.clone(),
        )
        return mel[:, :, prompt_feat.shape[1] :].float(), prefix

    def _sampler_inputs(
        self, tokens, prompt_tokens, prompt_feat, embedding, finalize: bool, streaming: bool, start: int
    ):
        """The sampler's inputs for the frames from ``start`` on: (speaker ``(1, 80)``, ``mu (1, 80, T')``,
        ``mask (1, 1, T')`` all valid, ``cond (1, 80, T')`` the prompt mel then zeros)."""
        frames = self.output_frames(prompt_tokens.shape[1], tokens.shape[1], finalize)
        speaker, mu = self._conditioning(embedding, torch.cat([prompt_tokens, tokens], dim=1), finalize, streaming)
        device = mu.device
        cond = torch.zeros(1, frames, self.config.output_size, device=device, dtype=mu.dtype)
        cond[:, : prompt_feat.shape[1]] = prompt_feat.to(device=device, dtype=mu.dtype)
        mask = torch.ones(1, 1, frames - start, device=device, dtype=mu.dtype)  # every frame valid (a prefix needs it)
        return speaker, mu[:, start:].transpose(1, 2).contiguous(), mask, cond[:, start:].transpose(1, 2)

    @torch.inference_mode()
    def build_prefix(
        self, prompt_tokens: torch.Tensor, prompt_feat: torch.Tensor, embedding: torch.Tensor, tokens: int
    ) -> FlowPrefix:
        """Run the sampler over the first ``tokens`` prompt tokens once and keep every step's layer tensors.

        ``tokens`` must be a whole number of attention chunks and leave at least the look-ahead of
        prompt after it (so nothing a later call adds can reach those frames). Shapes as :meth:`inference`.
        """
        frames = self._check_prefix_request(prompt_tokens, prompt_feat, embedding, tokens)
        speaker, mu = self._conditioning(embedding, prompt_tokens, finalize=False, streaming=True)
        mu = mu[:, :frames]
        cond = prompt_feat[:, :frames].to(device=mu.device, dtype=mu.dtype)
        mask = torch.ones(1, 1, frames, device=mu.device, dtype=mu.dtype)
        mu, cond = mu.transpose(1, 2).contiguous(), cond.transpose(1, 2).contiguous()
        graphs = self.cuda_graphs(mu.device)  # CUDA: replayed from the graph of this prefix length
        steps = None if graphs is None else graphs.build(self, mu, mask, speaker, cond)
        if steps is None:
            steps = [StepState() for _ in range(self.decoder.config.n_timesteps)]
            self.decoder(mu, mask, speaker, cond, True, steps)
        prefix = FlowPrefix(
            tokens=tokens,
            frames=frames,
            steps=steps,
            prompt_tokens=prompt_tokens[:, :tokens].clone(),
            embedding=embedding.clone(),
        )
        if graphs is not None:
            graphs.after_build(self, prefix)
        return prefix

    def _check_prefix_request(self, prompt_tokens, prompt_feat, embedding, tokens: int) -> int:
        """Raise FlowInputError unless a prefix of ``tokens`` prompt tokens can be cached; return its mel frames."""
        self._check_inputs(prompt_tokens, prompt_tokens[:, :0], prompt_feat, embedding, finalize=True)
        chunk = self.config.estimator.static_chunk_size // self.config.token_mel_ratio
        if tokens <= 0 or tokens % chunk or tokens > prompt_tokens.shape[1] - self.config.pre_lookahead_len:
            raise FlowInputError(
                f"a cached prefix must be a positive multiple of {chunk} tokens followed by at least "
                f"{self.config.pre_lookahead_len} more prompt tokens; got {tokens} of {prompt_tokens.shape[1]}"
            )
        return self.config.token_mel_ratio * tokens

    def _conditioning(self, embedding: torch.Tensor, ids: torch.Tensor, finalize: bool, streaming: bool):
        """(projected speaker ``(1, 80)``, frame features ``mu (1, T, 80)`` of token ``ids (1, L)``),
        on the module's device."""
        weight = self.spk_embed_affine_layer.weight
        speaker = self.spk_embed_affine_layer(F.normalize(embedding.to(weight.device).float(), dim=1).to(weight.dtype))
        ids = ids.to(device=weight.device, dtype=torch.long).clamp(min=0)
        return speaker, self.token_features(self.input_embedding(ids), finalize, streaming)

    def _check_prefix(self, prefix: FlowPrefix, prompt_tokens, embedding, streaming: bool) -> None:
        if not streaming:
            raise FlowInputError("a cached prefix only applies to streaming (chunk-causal) calls")
        if not prefix.matches(prompt_tokens, embedding):
            raise FlowInputError("the cached flow prefix was made from a different voice prompt")
        if prompt_tokens.shape[1] < prefix.tokens + self.config.pre_lookahead_len:
            raise FlowInputError("the cached flow prefix does not leave the look-ahead inside the prompt")

    def _check_inputs(self, tokens, prompt_tokens, prompt_feat, embedding, finalize: bool) -> None:
        config = self.config
        for name, ids in (("tokens", tokens), ("prompt_tokens", prompt_tokens)):
            if ids.dim() != 2 or ids.shape[0] != 1:
                raise FlowInputError(f"{name} must have shape (1, N), got {tuple(ids.shape)}")
            if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
                raise FlowInputError(f"{name} must hold integer speech-token ids, got {ids.dtype}")
            if ids.numel() and int(ids.max()) >= config.vocab_size:
                raise FlowInputError(
                    f"{name} contains speech-token id {int(ids.max())}, but this flow model knows ids "
                    f"0..{config.vocab_size - 1}; were the tokens made by a different model version?"
                )
        minimum = 1 if finalize else config.pre_lookahead_len + 1
        if tokens.shape[1] < minimum:
            why = (
                "" if finalize else f" (the last {config.pre_lookahead_len} of an unfinished chunk are look-ahead only)"
            )
            raise FlowInputError(f"tokens has {tokens.shape[1]} ids; at least {minimum} are needed{why}")
        if prompt_feat.dim() != 3 or prompt_feat.shape[0] != 1 or prompt_feat.shape[2] != config.output_size:
            raise FlowInputError(
                f"prompt_feat must have shape (1, frames, {config.output_size}), got {tuple(prompt_feat.shape)}"
            )
        if embedding.dim() != 2 or embedding.shape != (1, config.spk_embed_dim):
            raise FlowInputError(f"embedding must have shape (1, {config.spk_embed_dim}), got {tuple(embedding.shape)}")
        frames = self.output_frames(prompt_tokens.shape[1], tokens.shape[1], finalize)
        check_frame_count(frames)
        if prompt_feat.shape[1] > frames:
            raise FlowInputError(
                f"prompt_feat has {prompt_feat.shape[1]} frames but the tokens only cover {frames}; "
                f"the prompt mel should have {config.token_mel_ratio} frames per prompt token"
            )
