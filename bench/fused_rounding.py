"""Where torch.compile's fused decoding step rounds differently from eager, piece by piece, at 16 bits.

    python bench/fused_rounding.py --device cuda --dtype float16

Full-size CosyVoice3 LM with random weights; each layer's real inputs come from a prefill of the bench's
prompt (every position's hidden state before the layer). Each piece of :func:`decode_layer` (and the head's
log-probabilities) runs eager and compiled on the same rows; per inductor variant the JSON gives, per piece,
the share of output elements that are not bit-equal to eager's and the largest difference. Variants:
``default``; ``emulate`` (inductor's ``emulate_precision_casts``: a fused chain rounds its 16-bit
intermediates as eager does); ``+opaque_linear`` (every projection an opaque op: cuBLAS as eager calls it);
``+opaque_norm`` (RMSNorm an opaque op: eager's kernel and sum order). A piece equal under a variant is one a
fused step can keep eager's numbers for.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))


def _full_size_lm(device, dtype):
    sys.path.insert(0, str(HERE / "bench"))
    from llm_sampling import _full_size_lm as full_size_lm

    return full_size_lm(device, dtype)


def _opaque_ops():
    """(linear, rms_norm) as the product's opaque operations (``eager_kernels``): torch.compile calls them as they
    are and fuses nothing into them."""
    from cosyvoice_mac.models.cuda import eager_kernels

    return eager_kernels.linear, eager_kernels.rms_norm


def _pieces(eps, heads, kv_heads, head_dim, opaque_linear, opaque_norm):
    """name -> function(x (1, D), w) of one layer's decode pieces, written as decode_layer wrote them when this probe
    was measured (before the residual adds rode on addmm_ and SiLU * up became one kernel); ``w`` holds
    the layer's weights and the position's RoPE rows as arguments, so one compile serves every layer."""
    import torch
    import torch.nn.functional as F

    from cosyvoice_mac.models.llm.kv_cache import apply_rope

    def project(x, weight, bias=None):
        return opaque_linear(x, weight, bias) if opaque_linear is not None else F.linear(x, weight, bias)

    def norm(x, weight):
        return opaque_norm(x, weight, eps) if opaque_norm is not None else torch.rms_norm(x, weight.shape, weight, eps)

    def attention_input(x, w):
        qkv = project(norm(x, w["input_norm"]), w["qkv_weight"], w["qkv_bias"]).view(1, -1, head_dim)
        apply_rope(qkv.narrow(1, 0, heads + kv_heads), w["cos"], w["sin"])
        return qkv

    def norm_only(x, w):
        return norm(x, w["post_norm"])

    def mlp_residual(x, w):
        gate, up = project(norm(x, w["post_norm"]), w["gate_up_weight"]).chunk(2, dim=-1)
        return x + project(F.silu(gate) * up, w["down_weight"])

    def output_residual(x, w):
        return x + project(x, w["o_weight"])  # the attended rows are (1, heads * head_dim) = (1, D) here

    return {
        "attention_input": attention_input,
        "norm": norm_only,
        "mlp_residual": mlp_residual,
        "output_residual": output_residual,
    }


def _weights(layer) -> dict:
    attention, mlp = layer.self_attn, layer.mlp
    return {
        "input_norm": layer.input_layernorm.weight,
        "qkv_weight": attention.qkv_proj.weight,
        "qkv_bias": attention.qkv_proj.bias,
        "o_weight": attention.o_proj.weight,
        "post_norm": layer.post_attention_layernorm.weight,
        "gate_up_weight": mlp.gate_up_proj.weight,
        "down_weight": mlp.down_proj.weight,
    }


def compare(lm, inputs, rows_of, variant: str, opaque) -> dict:
    import torch
    import torch._dynamo
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    settings = {"emulate_precision_casts": variant != "default"}
    linear, rms_norm = opaque
    opaque_linear = linear if "opaque_linear" in variant else None
    opaque_norm = rms_norm if "opaque_norm" in variant else None
    config = lm.backbone.config
    pieces = _pieces(
        config.rms_norm_eps,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.head_dim,
        opaque_linear,
        opaque_norm,
    )
    totals: dict = {}
    with inductor_config.patch(settings), torch.no_grad():
        compiled = {name: torch.compile(piece, dynamic=False) for name, piece in pieces.items()}
        for layer_index, layer in enumerate(lm.backbone.layers):
            for position in range(inputs[layer_index].shape[1]):
                x = inputs[layer_index][:, position].contiguous()
                cos, sin = rows_of(position)
                weights = {**_weights(layer), "cos": cos, "sin": sin}
                for name, piece in pieces.items():
                    eager = piece(x, weights)
                    fused = compiled[name](x, weights)
                    entry = totals.setdefault(name, {"elements": 0, "different": 0, "max_abs": 0.0})
                    entry["elements"] += eager.numel()
                    entry["different"] += (eager != fused).sum().item()
                    entry["max_abs"] = max(entry["max_abs"], (eager.float() - fused.float()).abs().max().item())
        final = inputs[-1][0]
        head = lambda hidden: lm.llm_decoder(lm.backbone.norm(hidden)).float().log_softmax(dim=-1)  # noqa: E731
        eager = head(final)
        fused = torch.compile(head, dynamic=False)(final)
        totals["head_logp"] = {
            "elements": eager.numel(),
            "different": (eager != fused).sum().item(),
            "max_abs": (eager - fused).abs().max().item(),
        }
    for entry in totals.values():
        entry["share_different"] = entry["different"] / max(1, entry["elements"])
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    parser.add_argument("--positions", type=int, default=4, help="prompt positions per layer (the last ones)")
    parser.add_argument("--variants", default="default,emulate,emulate+opaque_linear,emulate+opaque_linear+opaque_norm")
    args = parser.parse_args()
    import torch
    import torch._inductor.config as inductor_config

    from cosyvoice_mac.bench.opcount import prompt_embeddings

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch._dynamo.config.cache_size_limit = 4096
    lm = _full_size_lm(device, dtype)
    embeds = prompt_embeddings(lm)
    captured = []
    hooks = [
        layer.register_forward_pre_hook(lambda module, inputs: captured.append(inputs[0].detach()))
        for layer in lm.backbone.layers
    ]
    hooks.append(lm.backbone.norm.register_forward_pre_hook(lambda module, inputs: captured.append(inputs[0].detach())))
    with torch.no_grad():
        lm.backbone(embeds.to(device=device, dtype=dtype))
    for hook in hooks:
        hook.remove()
    inputs = [hidden[:, -args.positions :] for hidden in captured]
    length = embeds.shape[1]
    lm.backbone.rotary.ensure(length, device, dtype)
    table = lm.backbone.rotary.table

    def rows_of(position):
        return table[length - args.positions + position : length - args.positions + position + 1].unbind(1)

    opaque = _opaque_ops()
    result = {
        "device": args.device,
        "dtype": args.dtype,
        "torch": torch.__version__,
        "keep_addmm_fused_for_half_dtypes": getattr(inductor_config, "keep_addmm_fused_for_half_dtypes", None),
        "variants": {},
    }
    for variant in args.variants.split(","):
        result["variants"][variant] = compare(lm, inputs, rows_of, variant, opaque)
        for name, entry in result["variants"][variant].items():
            print(f"{variant:40s} {name:16s} {entry['share_different']:.2e} {entry['max_abs']:.3g}", file=sys.stderr)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
