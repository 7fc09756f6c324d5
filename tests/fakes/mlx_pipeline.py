"""Real tiny CosyVoice2/CosyVoice3 pipelines on the MLX engine whose MLX flow fails on purpose (takeover tests)."""

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


def without_mlx(model_dir, device="auto", dtype=None, random_weights=False, **options):
    """``CosyVoice.from_pretrained`` in a worker where ``mlx`` cannot be imported (as on a Mac without the
    package): ``sys.modules`` blocks it before the engine is chosen, so the real choice rule meets it."""
    import sys

    from cosyvoice_mac.pipeline import CosyVoice

    for name in [name for name in sys.modules if name == "mlx" or name.startswith("mlx.")]:
        del sys.modules[name]
    sys.modules["mlx"] = None  # `import mlx` now raises ModuleNotFoundError
    return CosyVoice.from_pretrained(model_dir, device=device, dtype=dtype, random_weights=random_weights, **options)


WITHOUT_MLX_FACTORY = "tests.fakes.mlx_pipeline:without_mlx"
