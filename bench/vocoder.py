"""Vocoder speed in torch: HiFT as loaded vs the split rewrite that Core ML runs, and STFT variants.

    python bench/vocoder.py [--version cosyvoice3] [--frames 500] [--repeats 3] [--threads 2] [--model DIR]

Prints one JSON object: min and median seconds of ``--repeats`` runs per case after one warm-up,
cases interleaved round-robin so that load changes hit all of them alike:

* ``hift``: ``HiFT.inference`` (weight norm folded at load, STFT/iSTFT as convolutions);
* ``split``: the Core ML design run in torch: f0 graph + numpy float64 source + decoder graph with
  polyphase STFT/iSTFT (``cosyvoice_mac.coreml.split.torch_split_vocoder``), and its parts;
* ``split_chunked``: the same in 128-frame chunks with context (the Neural Engine layout);
* ``hift_fft_stft``: ``HiFT.inference`` with ``torch.stft`` / ``torch.istft`` instead of the convs
  (CPU only; complex FFTs are not used in the app), to see which STFT form is faster here;
* ``stft_only_*``: just the analysis + synthesis of ``480 T`` samples: conv (HiFT), FFT, polyphase
  (the split graph's form; without the envelope division, which the host does).

Without ``--model`` a full-size vocoder with random weights is used (speed does not depend on the
weight values). Check the load average (``load_before``) before comparing numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from cosyvoice_mac.coreml.host import HostSource, pad_polyphase  # noqa: E402
from cosyvoice_mac.coreml.rewrite import polyphase_istft_kernel, polyphase_stft_kernel  # noqa: E402
from cosyvoice_mac.coreml.split import torch_split_vocoder  # noqa: E402
from cosyvoice_mac.models.vocoder import GaussianSourceNoise, HiFT, HiFTConfig, load_hift  # noqa: E402
from cosyvoice_mac.pipeline.fullsize import official_config  # noqa: E402
from cosyvoice_mac.pipeline.model_dir import detect_version  # noqa: E402


class FFTSTFT(torch.nn.Module):
    """torch.stft / torch.istft with HiFT's settings (Hann 16, hop 4, centred), real/imag stacked."""

    def __init__(self, n_fft: int = 16, hop: int = 4):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)

    def stft(self, signal: torch.Tensor) -> torch.Tensor:
        spectrum = torch.stft(signal, self.n_fft, self.hop, self.n_fft, window=self.window, return_complex=True)
        return torch.cat([spectrum.real, spectrum.imag], dim=1)

    def istft(self, spectrum: torch.Tensor) -> torch.Tensor:
        bins = self.n_fft // 2 + 1
        complex_spectrum = torch.complex(spectrum[:, :bins], spectrum[:, bins:])
        return torch.istft(complex_spectrum, self.n_fft, self.hop, self.n_fft, window=self.window)


def run_interleaved(cases: dict, repeats: int) -> dict:
    """Time every case ``repeats`` times, round-robin (so load changes hit all alike): min and median."""
    for function in cases.values():
        function()  # warm-up
    runs: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, function in cases.items():
            started = time.perf_counter()
            function()
            runs[name].append(time.perf_counter() - started)
    return {
        name: {"min": round(min(values), 3), "median": round(statistics.median(values), 3)}
        for name, values in runs.items()
    }


def _with_stft(hift, stft, function):
    original = hift.stft
    hift.stft = stft
    try:
        return function()
    finally:
        hift.stft = original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", choices=("cosyvoice3", "cosyvoice2"), default="cosyvoice3")
    parser.add_argument("--model", type=Path, help="model folder (default: full-size random weights)")
    parser.add_argument("--frames", type=int, default=500, help="mel frames (50 per second of audio)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip", nargs="*", default=[], help="cases to skip, e.g. split_chunked hift_fft_stft")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.model is not None:
        version = detect_version(args.model)
        hift = load_hift(args.model / f"{version}.yaml", args.model / "hift.pt")
    else:
        version = args.version
        torch.manual_seed(0)
        hift = HiFT(HiFTConfig.from_yaml(official_config(version)["hift"])).eval()
    mel = torch.randn(1, 80, args.frames, generator=torch.Generator().manual_seed(0)) * 2 - 5
    noise = lambda: GaussianSourceNoise(seed=1) if version == "cosyvoice2" else None  # noqa: E731
    results: dict = {
        "version": version,
        "frames": args.frames,
        "audio_s": args.frames / 50,
        "threads": args.threads,
        "torch": torch.__version__,
        "load_before": os.getloadavg()[0],
    }
    split = torch_split_vocoder(hift)
    f0 = split.f0_function(mel.numpy())[0]
    host = HostSource.from_hift(hift)
    source = host(f0, noise() or split.default_noise)
    cases = {
        "hift": lambda: hift.inference(mel, noise=noise()),
        "split": lambda: split.inference(mel, noise=noise()),
        "split_f0": lambda: split.f0_function(mel.numpy()),
        "split_host_source": lambda: host(f0, noise() or split.default_noise),
        "split_decode": lambda: split.decode(mel.numpy(), source),
    }
    if "split_chunked" not in args.skip:
        chunked = torch_split_vocoder(hift, chunk_frames=128)
        cases["split_chunked"] = lambda: chunked.inference(mel, noise=noise())
    conv_stft = hift.stft
    fft_stft = FFTSTFT(hift.config.n_fft, hift.config.hop_len)
    if "hift_fft_stft" not in args.skip:
        cases["hift_fft_stft"] = lambda: _with_stft(hift, fft_stft, lambda: hift.inference(mel, noise=noise()))
    signal = torch.from_numpy(source)[None]
    stft_kernel = polyphase_stft_kernel(conv_stft.analysis_kernel)
    istft_kernel = polyphase_istft_kernel(conv_stft.synthesis_kernel)
    cases["stft_only_conv"] = lambda: conv_stft.istft(conv_stft.stft(signal))
    cases["stft_only_fft"] = lambda: fft_stft.istft(fft_stft.stft(signal))
    cases["stft_only_polyphase"] = lambda: F.conv1d(
        F.conv1d(torch.from_numpy(pad_polyphase(source)), stft_kernel), istft_kernel, padding=3
    )
    with torch.inference_mode():
        results["seconds"] = run_interleaved(cases, args.repeats)
    results["rtf_min"] = {
        name: round(value["min"] / results["audio_s"], 3)
        for name, value in results["seconds"].items()
        if not name.startswith("stft_only")
    }
    results["load_after"] = os.getloadavg()[0]
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
