"""Cost of the two MPS policies, measured here with each one forced on for this device.

    python bench/mac_policies.py [--version cosyvoice3] [--device cpu] [--runs 3] [--frames 1000]

* ``first_audio``: seconds to the first streamed chunk of full-size random weights, with the device
  turns of :class:`cosyvoice_mac.pipeline.producer.DeviceTurns` on (``COSYVOICE_SERIAL_DEVICE=1``,
  what MPS always gets) and off, runs interleaved; the voice's flow prefix is cached (a voice used
  before) and, separately, rebuilt (a new voice);
* ``vocoder``: ``HiFT.inference`` over ``--frames`` mel frames in one shot and in windows under the
  MPS conv limit (the decoding MPS always gets), with the windows' count.

Prints one JSON object: per case the median and all runs, and on/off ratios.
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package, not an installed one

import torch  # noqa: E402

from cosyvoice_mac.bench.measure import (  # noqa: E402
    REFERENCE_TEXT_IDS,
    TEXT,
    forced_token_stream,
    synthetic_prompt,
    time_to_first_audio,
)
from cosyvoice_mac.device import MPS_CONV_LIMIT, SERIAL_DEVICE_ENV, select_device, synchronize  # noqa: E402
from cosyvoice_mac.models.vocoder.window import plan_windows  # noqa: E402
from cosyvoice_mac.pipeline.cosyvoice import CosyVoice  # noqa: E402


def first_audio(model: CosyVoice, runs: int, tokens: int) -> dict:
    speaker = model.prepare_prompt(synthetic_prompt(), sample_rate=24000)
    text_ids = torch.tensor([model.tokenizer.encode(TEXT)])[:, :REFERENCE_TEXT_IDS]  # as cosyvoice_mac.bench.measure
    list(forced_token_stream(model, text_ids, speaker, 10))  # warm-up
    time_to_first_audio(model, text_ids, speaker, tokens)
    results: dict[str, list[float]] = {"on": [], "off": [], "on_new_voice": [], "off_new_voice": []}
    for _ in range(runs):
        for setting in ("on", "off"):
            os.environ[SERIAL_DEVICE_ENV] = "1" if setting == "on" else "0"
            results[setting].append(time_to_first_audio(model, text_ids, speaker, tokens))
            results[f"{setting}_new_voice"].append(time_to_first_audio(model, text_ids, speaker, tokens, True))
    os.environ.pop(SERIAL_DEVICE_ENV, None)
    report = {key: {"median_s": statistics.median(values), "runs_s": values} for key, values in results.items()}
    report["ratio_on_over_off"] = report["on"]["median_s"] / report["off"]["median_s"]
    report["ratio_on_over_off_new_voice"] = report["on_new_voice"]["median_s"] / report["off_new_voice"]["median_s"]
    return report


def vocoder(model: CosyVoice, runs: int, frames: int) -> dict:
    hift, device = model.networks.hift, model.device
    mel = torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(0)).to(device) - 4.0
    times: dict[str, list[float]] = {"one_shot": [], "windows": []}
    for _ in range(runs + 1):  # the first round warms up
        for case, limit in (("one_shot", None), ("windows", MPS_CONV_LIMIT)):
            hift.conv_limit = limit
            synchronize(device)
            started = time.perf_counter()
            hift.inference(mel)
            synchronize(device)
            times[case].append(time.perf_counter() - started)
    hift.conv_limit = "auto"
    report = {case: {"median_s": statistics.median(values[1:]), "runs_s": values[1:]} for case, values in times.items()}
    report["windows_count"] = len(plan_windows(frames, frames, 0, MPS_CONV_LIMIT, hift))
    report["ratio_windows_over_one_shot"] = report["windows"]["median_s"] / report["one_shot"]["median_s"]
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=60, help="speech tokens the LLM may decode per request")
    parser.add_argument("--frames", type=int, default=1000, help="mel frames for the vocoder case (50 = 1 s)")
    args = parser.parse_args()
    model = CosyVoice.random_full_size(
        args.version, device=select_device(args.device), engine="torch"
    )  # PyTorch policies
    report = {
        "version": args.version,
        "device": str(model.device),
        "threads": torch.get_num_threads(),
        "load_before": os.getloadavg()[0],
        "first_audio": first_audio(model, args.runs, args.tokens),
        "vocoder": vocoder(model, args.runs, args.frames),
        "load_after": os.getloadavg()[0],
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
