"""Real tiny CosyVoice3 pipelines on the MLX engine whose MLX flow fails on purpose (takeover tests)."""

from __future__ import annotations

MLX_FAILURE = "[metal::malloc] simulated MLX failure"


def failing_mlx_flow(model_dir, device="auto", dtype=None, random_weights=False, *, fail_from_call: int = 2):
    """``CosyVoice.from_pretrained(engine='mlx')`` whose flow raises from its ``fail_from_call``-th call on
    (1: the warm-up already fails; 2: the warm-up passes and the first job fails)."""
    from cosyvoice_mac.pipeline import CosyVoice

    model = CosyVoice.from_pretrained(
        model_dir, device=device, dtype=dtype, random_weights=random_weights, engine="mlx"
    )
    flow = model.networks.flow
    working, calls = flow.inference, []

    def inference(*args, **kwargs):
        calls.append(None)
        if len(calls) >= fail_from_call:
            raise RuntimeError(MLX_FAILURE)
        return working(*args, **kwargs)

    flow.inference = inference
    return model


FAILING_MLX_FACTORY = "tests.fakes.mlx_pipeline:failing_mlx_flow"
