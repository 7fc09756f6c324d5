"""The CosyVoice2 flow in MLX: speech tokens (+ voice prompt) -> 80-bin log-mel (mirrors ``models.flow``, v2).

Token embedding -> upsampling conformer encoder (its own 3-token look-ahead, chunk-causal when
streaming) -> ``encoder_proj`` -> the same guided Euler sampler as CosyVoice3's MLX flow (fixed start
noise, classifier-free guidance as one batch of two) around the Matcha U-Net. Streaming calls can
start after a cached prompt prefix (:meth:`MlxFlowV2.build_prefix`, inherited). Same
:class:`FlowConfig` and ``flow.pt`` as the PyTorch flow; inputs and outputs are PyTorch CPU tensors,
as for :class:`cosyvoice_mac.mlx.flow.MlxFlow`, whose procedure this class shares.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import torch

from cosyvoice_mac.mlx.conformer import KEY_MAP as ENCODER_KEY_MAP
from cosyvoice_mac.mlx.conformer import UpsampleConformerEncoder
from cosyvoice_mac.mlx.convert import load_converted, to_mlx
from cosyvoice_mac.mlx.flow import FlowMatching, MlxFlow, MlxFlowError
from cosyvoice_mac.mlx.unet import KEY_MAP as UNET_KEY_MAP
from cosyvoice_mac.mlx.unet import CausalConditionalDecoder
from cosyvoice_mac.models.flow import FlowConfig
from cosyvoice_mac.versions import CONFORMER

KEY_MAP = ENCODER_KEY_MAP + UNET_KEY_MAP  # disjoint: encoder.* and decoder.estimator.* keys
# The low-memory mode stores the conformer layers' and the U-Net transformer blocks' projections and biases
# (372 of the flow's 450 MB in float32; norms stay float32) in fp16. Everything around them computes in
# float32 (the U-Net in its final_proj's dtype, the encoder in its embedding's), so each matmul promotes its
# fp16 weight to float32: fp16 storage, float32 arithmetic, as CosyVoice3's STORED_IN_HALF.
STORED_IN_HALF = (
    r"^(encoder\.(encoders|up_encoders)|decoder\.estimator\.(down|mid|up)_blocks\.\d+\.transformers)\.\d+\.(?!norm)"
)


class MlxFlowV2(MlxFlow):
    """Owns the token embedding, speaker projection, conformer ``encoder`` + ``encoder_proj`` and the CFM
    sampler around the U-Net, in MLX; ``inference`` and ``build_prefix`` are :class:`MlxFlow`'s."""

    stored_in_half = STORED_IN_HALF

    def __init__(self, config: FlowConfig):
        nn.Module.__init__(self)  # not MlxFlow's: that one builds CosyVoice3's front end
        if config.front != CONFORMER:
            raise MlxFlowError("MlxFlowV2 is CosyVoice2's conformer + U-Net flow; CosyVoice3's is MlxFlow")
        self.config = config
        self.input_embedding = nn.Embedding(config.vocab_size, config.input_size)
        self.spk_embed_affine_layer = nn.Linear(config.spk_embed_dim, config.output_size)
        self.encoder = UpsampleConformerEncoder(config.encoder)
        self.encoder_proj = nn.Linear(config.encoder_output_size, config.output_size)
        self.decoder = FlowMatching(CausalConditionalDecoder(config.estimator), config.cfm)

    @classmethod
    def from_checkpoint(
        cls,
        config: FlowConfig,
        path: str | Path,
        *,
        dtype: mx.Dtype | None = None,
        dtype_keys: str | None = None,
        cache_dir: Path | None = None,
    ) -> "MlxFlowV2":
        """``dtype`` for the weights whose names match ``dtype_keys`` (None: all); see ``STORED_IN_HALF``."""
        flow = cls(config)
        weights = load_converted(path, KEY_MAP, dtype=dtype, dtype_keys=dtype_keys, cache_dir=cache_dir)
        flow.load_weights(list(weights.items()), strict=True)
        mx.eval(flow.parameters())
        return flow

    def _conditioning(
        self, embedding: torch.Tensor, ids: torch.Tensor, finalize: bool, streaming: bool = False
    ) -> tuple[mx.array, mx.array]:
        """(projected speaker ``(1, 80)``, frame features ``mu (1, 2 L', 80)``) of token ``ids (1, L)``;
        not finalising, the last ``pre_lookahead_len`` tokens are look-ahead context only (L' = L - 3)."""
        unit = torch.nn.functional.normalize(embedding.float().cpu(), dim=1)  # the PyTorch flow's, on the CPU
        speaker = self.spk_embed_affine_layer(to_mlx(unit).astype(self.spk_embed_affine_layer.weight.dtype))
        embedded = self.input_embedding(mx.array(ids.clamp(min=0).to(torch.int32).cpu().numpy()))
        context = None
        if not finalize:
            split = embedded.shape[1] - self.config.pre_lookahead_len
            embedded, context = embedded[:, :split], embedded[:, split:]
        return speaker, self.encoder_proj(self.encoder(embedded, context, streaming))


def mlx_flow_for(config: FlowConfig):
    """The MLX flow class for ``config``'s version (its token front end): MlxFlow (v3) or MlxFlowV2 (v2)."""
    return MlxFlowV2 if config.front == CONFORMER else MlxFlow
