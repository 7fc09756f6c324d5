"""Vocoder speed in torch: HiFT as loaded vs the split rewrite that Core ML runs, and STFT variants.

    python bench/vocoder.py [--version cosyvoice3] [--frames 500] [--repeats 3] [--threads 2] [--model DIR]

Prints one JSON object (medians of ``--repeats`` timed runs after one warm-up, in seconds):

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


def timed(function, repeats: int) -> float:
    function()  # warm-up
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        runs.append(time.perf_counter() - started)
    return round(statistics.median(runs), 3)


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
        version = next(v for v in ("cosyvoice3", "cosyvoice2") if (args.model / f"{v}.yaml").is_file())
        hift = load_hift(args.model / f"{version}.yaml", args.model / "hift.pt")
    else:
        version = args.version
        torch.manual_seed(0)
        hift = HiFT(HiFTConfig.from_yaml(official_config(version)["hift"])).eval()
    mel = torch.randn(1, 80, args.frames, generator=torch.Generator().manual_seed(0)) * 2 - 5
    noise = lambda: GaussianSourceNoise(seed=1) if version == "cosyvoice2" else None  # noqa: E731
    results: dict = {
        "version": version, "frames": args.frames, "audio_s": args.frames / 50, "threads": args.threads,
        "torch": torch.__version__, "load_before": os.getloadavg()[0], "seconds": {},
    }
    seconds = results["seconds"]
    seconds["hift"] = timed(lambda: hift.inference(mel, noise=noise()), args.repeats)

    split = torch_split_vocoder(hift)
    seconds["split"] = timed(lambda: split.inference(mel, noise=noise()), args.repeats)
    f0 = split.f0_function(mel.numpy())[0]
    host = HostSource.from_hift(hift)
    seconds["split_f0"] = timed(lambda: split.f0_function(mel.numpy()), args.repeats)
    seconds["split_host_source"] = timed(lambda: host(f0, noise() or split.default_noise), args.repeats)
    source = host(f0, noise() or split.default_noise)
    seconds["split_decode"] = timed(lambda: split.decode(mel.numpy(), source), args.repeats)
    if "split_chunked" not in args.skip:
        chunked = torch_split_vocoder(hift, chunk_frames=128)
        seconds["split_chunked"] = timed(lambda: chunked.inference(mel, noise=noise()), args.repeats)

    conv_stft = hift.stft
    fft_stft = FFTSTFT(hift.config.n_fft, hift.config.hop_len)
    if "hift_fft_stft" not in args.skip:
        hift.stft = fft_stft
        try:
            seconds["hift_fft_stft"] = timed(lambda: hift.inference(mel, noise=noise()), args.repeats)
        finally:
            hift.stft = conv_stft
    signal = torch.from_numpy(source)[None]
    seconds["stft_only_conv"] = timed(lambda: conv_stft.istft(conv_stft.stft(signal)), args.repeats)
    seconds["stft_only_fft"] = timed(lambda: fft_stft.istft(fft_stft.stft(signal)), args.repeats)
    stft_kernel = polyphase_stft_kernel(conv_stft.analysis_kernel)
    istft_kernel = polyphase_istft_kernel(conv_stft.synthesis_kernel)
    seconds["stft_only_polyphase"] = timed(
        lambda: F.conv1d(F.conv1d(torch.from_numpy(pad_polyphase(source)), stft_kernel), istft_kernel, padding=3),
        args.repeats,
    )
    results["rtf"] = {name: round(value / results["audio_s"], 3) for name, value in seconds.items()
                      if not name.startswith("stft_only")}
    results["load_after"] = os.getloadavg()[0]
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
