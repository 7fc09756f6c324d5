"""The MLX vocoder's memory peak, windowed against one shot, and its harmonic source's alone, as JSON.

On the tiny CosyVoice2 parity vocoder (``../shared/parity``) with MLX's CPU backend: for each mel length, the peak
of MLX's active memory over an ``inference`` call with 100-frame windows and with none, and over the source alone.
Run it in two checkouts to compare them (``PYTHONPATH`` picks the checkout): ``python bench/mlx_vocoder_peak.py``.
"""

from __future__ import annotations

import json
import platform
import sys

import mlx.core as mx
import torch

from cosyvoice_mac.mlx.convert import to_mlx
from cosyvoice_mac.mlx.hift import load_mlx_hift
from cosyvoice_mac.models.vocoder import GaussianSourceNoise
from tests.parity.common import parity_dir

WINDOW_LIMIT = 120 * 100 + 1  # 100-frame windows
LENGTHS = (600, 1200)


def peak(run) -> int:
    mx.clear_cache()
    held = mx.get_active_memory()
    mx.reset_peak_memory()
    run()
    return mx.get_peak_memory() - held


def main() -> int:
    folder = parity_dir() / "cosyvoice2_tiny"
    hift = load_mlx_hift(folder / "cosyvoice2.yaml", folder / "hift.pt")
    rows = []
    for frames in LENGTHS:
        mel = torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(2)) - 4.0

        def inference(limit, mel=mel):
            hift.conv_limit = limit
            hift.inference(mel, noise=GaussianSourceNoise(seed=5))

        f0 = hift.f0_predictor(to_mlx(mel).transpose(0, 2, 1))
        mx.eval(f0)
        windowed, one_shot = peak(lambda: inference(WINDOW_LIMIT)), peak(lambda: inference(None))
        source = peak(lambda f0=f0: mx.eval(hift.m_source(f0, GaussianSourceNoise(seed=5))))
        rows.append(
            {
                "frames": frames,
                "windowed_peak_bytes": windowed,
                "one_shot_peak_bytes": one_shot,
                "windowed_over_one_shot": round(windowed / one_shot, 3),
                "source_peak_bytes": source,
            }
        )
    machine = {"platform": platform.platform(), "processor": platform.processor(), "mlx": mx.__version__}
    print(json.dumps({"window_limit": WINDOW_LIMIT, "machine": machine, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
