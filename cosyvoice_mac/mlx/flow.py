"""The flow in MLX: speech tokens (+ voice prompt) -> 80-bin log-mel (mirrors ``models.flow``).

Token front end -> conditional flow matching (Euler on the cosine time grid from the fixed start noise,
classifier-free guidance as one batch of two) around the estimator. Only the front end and the estimator
differ between the versions (``FlowConfig.front``, the ``flow_front`` of :mod:`cosyvoice_mac.versions`):
CosyVoice3's pre-look-ahead layer (each frame repeated ``token_mel_ratio`` times) and DiT, or CosyVoice2's
upsampling conformer encoder + ``encoder_proj`` and U-Net. Streaming calls use chunk-causal attention and
can start after a cached prompt prefix (:meth:`MlxFlow.build_prefix`). Same :class:`FlowConfig` and
``flow.pt`` as the PyTorch flow; the input checks and frame arithmetic are the PyTorch flow's own methods.

Inputs are PyTorch tensors as for :class:`cosyvoice_mac.models.flow.Flow`; the mel comes back as a
CPU float32 tensor ``(1, 80, T)``.
"""

from __future__ import annotations

import re
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import torch

from cosyvoice_mac.mlx.conformer import KEY_MAP as CONFORMER_KEY_MAP
from cosyvoice_mac.mlx.conformer import UpsampleConformerEncoder
from cosyvoice_mac.mlx.convert import load_converted, to_mlx, to_torch
from cosyvoice_mac.mlx.dit import KEY_MAP as DIT_KEY_MAP
from cosyvoice_mac.mlx.dit import DiT, PrefixStep
from cosyvoice_mac.mlx.lookahead import PreLookaheadLayer
from cosyvoice_mac.mlx.unet import KEY_MAP as UNET_KEY_MAP
from cosyvoice_mac.mlx.unet import CausalConditionalDecoder
from cosyvoice_mac.models.flow import CFMConfig, Flow, FlowConfig, fixed_start_noise
from cosyvoice_mac.models.flow.cfm import ConditionalFlowMatching
from cosyvoice_mac.models.flow.prefix import FlowPrefix
from cosyvoice_mac.versions import CONFORMER, PRE_LOOKAHEAD

# flow.pt's names -> the modules of each token front end (the DiT's renames only occur under
# decoder.estimator; the conformer's and the U-Net's are disjoint: encoder.* and decoder.estimator.*).
KEY_MAPS = {PRE_LOOKAHEAD: DIT_KEY_MAP, CONFORMER: CONFORMER_KEY_MAP + UNET_KEY_MAP}
# The parameters the low-memory mode stores in fp16, per token front end. CosyVoice3: the DiT's transformer
# blocks (almost all of its flow's 1.33 GB). CosyVoice2: the conformer layers' and the U-Net transformer
# blocks' projections and biases (372 of its flow's 450 MB; norms stay float32). Everything around them
# computes in float32 (the DiT and U-Net in their output projection's dtype, the encoder in its embedding's),
# so each matmul promotes its fp16 weight to float32 one layer at a time: fp16 storage, float32 arithmetic
# (as PyTorch's low memory).
STORED_IN_HALF = {
    PRE_LOOKAHEAD: r"^decoder\.estimator\.transformer_blocks\.",
    CONFORMER: (
        r"^(encoder\.(encoders|up_encoders)|decoder\.estimator\.(down|mid|up)_blocks\.\d+\.transformers)\.\d+\.(?!norm)"
    ),
}


def store_in_half(module: nn.Module, names: str, dtype: mx.Dtype = mx.float16) -> int:
    """Cast in place the float parameters of ``module`` whose names match the regex ``names`` (the rule a
    checkpoint read applies through ``load_converted(dtype_keys=...)``), each evaluated before the next so
    its float32 buffer is freed as it goes. Returns the bytes saved."""
    selected, saved = re.compile(names), 0
    for path, owner in module.named_modules():
        for key in [key for key, value in owner.items() if isinstance(value, mx.array)]:
            array = owner[key]
            name = f"{path}.{key}" if path else key
            if selected.match(name) and mx.issubdtype(array.dtype, mx.floating) and array.dtype != dtype:
                cast = array.astype(dtype)
                mx.eval(cast)
                saved += array.nbytes - cast.nbytes
                owner[key] = cast
    return saved


class FlowMatching(nn.Module):
    """Owns the ``estimator`` (DiT or U-Net) and runs the guided Euler sampler around it (state, times float32)."""

    time_grid = ConditionalFlowMatching.time_grid  # the PyTorch sampler's grid (float32, on the CPU)

    def __init__(self, estimator: DiT | CausalConditionalDecoder, config: CFMConfig):
        super().__init__()
        self.estimator = estimator
        self.config = config

    def velocity(self, x, mu, t, spks, cond, streaming: bool, state: PrefixStep | None) -> mx.array:
        """Guided ``(1 + w) v(cond) - w v(uncond)`` from one estimator call of batch 2 (uncond zeroes mu/spks/cond)."""
        rate = self.config.inference_cfg_rate
        pair = lambda z: mx.concatenate([z, z])  # noqa: E731
        conditioned_only = lambda z: mx.concatenate([z, mx.zeros_like(z)])  # noqa: E731
        out = self.estimator(
            pair(x),
            conditioned_only(mu),
            mx.broadcast_to(t, (2,)),
            conditioned_only(spks),
            conditioned_only(cond),
            streaming,
            state,
        ).astype(mx.float32)
        return (1.0 + rate) * out[:1] - rate * out[1:]

    def __call__(
        self,
        mu: mx.array,
        spks: mx.array,
        cond: mx.array,
        streaming: bool = False,
        states: list[PrefixStep] | None = None,
    ) -> mx.array:
        """``mu, cond (1, T, 80)``, ``spks (1, 80)`` -> mel ``(1, T, 80)`` float32.

        ``states`` (one per Euler step, streaming only): record a prefix, or make the frames after one.
        """
        if states is not None and (len(states) != self.config.n_timesteps or not streaming):
            raise ValueError(f"a cached prefix needs streaming=True and {self.config.n_timesteps} step states")
        start = 0 if states is None or states[0].recording else states[0].frames
        grid = self.time_grid(torch.device("cpu")).numpy()
        x = to_mlx(fixed_start_noise(mu.shape[1], start=start)).transpose(0, 2, 1)
        # Upstream advances t by accumulating dt (t += dt; dt = grid[k+1] - t); float32 as there.
        t, dt = grid[0], grid[1] - grid[0]
        for step in range(1, len(grid)):
            state = None if states is None else states[step - 1]
            x = x + mx.array(dt) * self.velocity(x, mu, mx.array(t), spks, cond, streaming, state)
            t = np.float32(t + dt)
            if step < len(grid) - 1:
                dt = np.float32(grid[step + 1] - t)
            mx.eval(x)  # one graph per step: bounded memory, and the prefix tensors materialise
        if states is not None and states[0].recording:
            for state in states:
                state.frames, state.recording = mu.shape[1] if state.keep is None else state.keep, False
        return x


class MlxFlow(nn.Module):
    """Owns the token embedding, speaker projection, token front end and the CFM sampler with its estimator, in MLX."""

    output_frames = Flow.output_frames
    _check_inputs = Flow._check_inputs
    _check_prefix = Flow._check_prefix
    _check_prefix_request = Flow._check_prefix_request

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
            self.encoder = UpsampleConformerEncoder(config.encoder)
            self.encoder_proj = nn.Linear(config.encoder_output_size, config.output_size)
            estimator = CausalConditionalDecoder(config.estimator)
        self.decoder = FlowMatching(estimator, config.cfm)

    @classmethod
    def from_checkpoint(
        cls,
        config: FlowConfig,
        path: str | Path,
        *,
        dtype: mx.Dtype | None = None,
        dtype_keys: str | None = None,
        cache_dir: Path | None = None,
    ) -> "MlxFlow":
        """``dtype`` for the weights whose names match ``dtype_keys`` (None: all); see ``STORED_IN_HALF``."""
        flow = cls(config)
        weights = load_converted(path, KEY_MAPS[config.front], dtype=dtype, dtype_keys=dtype_keys, cache_dir=cache_dir)
        if config.front == PRE_LOOKAHEAD:  # the DiT's angles reach 15 000 rad: they need float32 frequencies
            frequencies = "decoder.estimator.rotary_embed.inv_freq"
            weights[frequencies] = weights[frequencies].astype(mx.float32)
        flow.load_weights(list(weights.items()), strict=True)
        mx.eval(flow.parameters())
        return flow

    def _conditioning(
        self, embedding: torch.Tensor, ids: torch.Tensor, finalize: bool, streaming: bool = False
    ) -> tuple[mx.array, mx.array]:
        """(projected speaker ``(1, 80)``, frame features ``mu (1, T, 80)``) of token ``ids (1, L)``."""
        unit = torch.nn.functional.normalize(embedding.float().cpu(), dim=1)  # the PyTorch flow's, on the CPU
        speaker = self.spk_embed_affine_layer(to_mlx(unit).astype(self.spk_embed_affine_layer.weight.dtype))
        embedded = self.input_embedding(mx.array(ids.clamp(min=0).to(torch.int32).cpu().numpy()))
        return speaker, self.token_features(embedded, finalize, streaming)

    def token_features(self, embedded: mx.array, finalize: bool, streaming: bool) -> mx.array:
        """Token embeddings ``(1, L, C)`` -> frame features ``mu (1, ratio * L', 80)``, as the PyTorch flow's.

        When not finalising, the last ``pre_lookahead_len`` tokens are look-ahead context only (L' = L - 3);
        ``streaming`` makes the conformer's attention chunk-causal (the pre-look-ahead layer has none).
        """
        context = None
        if not finalize:
            split = embedded.shape[1] - self.config.pre_lookahead_len
            embedded, context = embedded[:, :split], embedded[:, split:]
        if self.config.front == PRE_LOOKAHEAD:
            features = self.pre_lookahead_layer(embedded, context)
            return mx.repeat(features, self.config.token_mel_ratio, axis=1)
        return self.encoder_proj(self.encoder(embedded, context, streaming))

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
        """Speech tokens -> log-mel of the generated part, ``(1, 80, T - F)`` float32 CPU tensor.

        Shapes and flags as :meth:`cosyvoice_mac.models.flow.Flow.inference`; ``prefix`` comes from
        :meth:`build_prefix` of this model.
        """
        self._check_inputs(tokens, prompt_tokens, prompt_feat, embedding, finalize)
        if prefix is not None:
            self._check_prefix(prefix, prompt_tokens, embedding, streaming)
        return self._generated_mel(tokens, prompt_tokens, prompt_feat, embedding, finalize, streaming, prefix)

    def _generated_mel(
        self, tokens, prompt_tokens, prompt_feat, embedding, finalize, streaming, prefix=None, steps=None
    ):
        """The sampler over the frames after ``prefix`` (or all, recording into ``steps`` when given): the generated
        part's mel ``(1, 80, T - F)`` float32 CPU tensor. Inputs checked by the caller."""
        frames = self.output_frames(prompt_tokens.shape[1], tokens.shape[1], finalize)
        prompt_frames = prompt_feat.shape[1]
        ids = torch.cat([prompt_tokens.cpu(), tokens.cpu()], dim=1)
        speaker, mu = self._conditioning(embedding, ids, finalize, streaming)
        cond = torch.zeros(1, frames, self.config.output_size)
        cond[:, :prompt_frames] = prompt_feat.float().cpu()
        start = 0 if prefix is None else prefix.frames
        states = steps if prefix is None else prefix.steps
        mel = self.decoder(mu[:, start:], speaker, to_mlx(cond[:, start:]).astype(mu.dtype), streaming, states)
        return to_torch(mel[:, prompt_frames - start :].transpose(0, 2, 1))

    def first_chunk_recording_prefix(
        self,
        tokens: torch.Tensor,
        prompt_tokens: torch.Tensor,
        prompt_feat: torch.Tensor,
        embedding: torch.Tensor,
        prefix_tokens: int,
    ) -> tuple[torch.Tensor, FlowPrefix]:
        """A streamed chunk with no cached prefix (``finalize=False``) that records the voice's prefix of its first
        ``prefix_tokens`` prompt tokens on the way: (mel ``(1, 80, T - F)``, FlowPrefix), as
        :meth:`cosyvoice_mac.models.flow.Flow.first_chunk_recording_prefix`: one sampler call over the prompt and
        the chunk instead of a prefix build and then the chunk (chunk-causal attention and causal convolutions
        keep the recorded frames' tensors as a build over them alone makes them)."""
        prefix_frames = self._check_prefix_request(prompt_tokens, prompt_feat, embedding, prefix_tokens)
        self._check_inputs(tokens, prompt_tokens, prompt_feat, embedding, finalize=False)
        steps = [PrefixStep(keep=prefix_frames) for _ in range(self.config.cfm.n_timesteps)]
        mel = self._generated_mel(tokens, prompt_tokens, prompt_feat, embedding, False, True, steps=steps)
        mx.eval([step.tensors for step in steps])  # usable from any thread's stream
        prefix = FlowPrefix(
            tokens=prefix_tokens,
            frames=prefix_frames,
            steps=steps,
            prompt_tokens=prompt_tokens[:, :prefix_tokens].clone(),
            embedding=embedding.clone(),
        )
        return mel, prefix

    def build_prefix(
        self, prompt_tokens: torch.Tensor, prompt_feat: torch.Tensor, embedding: torch.Tensor, tokens: int
    ) -> FlowPrefix:
        """Run the sampler over the first ``tokens`` prompt tokens once and keep every step's layer tensors."""
        frames = self._check_prefix_request(prompt_tokens, prompt_feat, embedding, tokens)
        speaker, mu = self._conditioning(embedding, prompt_tokens.cpu(), finalize=False, streaming=True)
        cond = to_mlx(prompt_feat[:, :frames].float().cpu()).astype(mu.dtype)
        steps = [PrefixStep() for _ in range(self.config.cfm.n_timesteps)]
        self.decoder(mu[:, :frames], speaker, cond, True, steps)
        mx.eval([step.tensors for step in steps])  # usable from any thread's stream
        return FlowPrefix(
            tokens=tokens,
            frames=frames,
            steps=steps,
            prompt_tokens=prompt_tokens[:, :tokens].clone(),
            embedding=embedding.clone(),
        )
