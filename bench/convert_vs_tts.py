"""Voice conversion of 10 s of speech next to text-to-speech of 10 s, on the full-size networks with RANDOM
weights (compute does not depend on the weights), in one process, interleaved, wall and CPU seconds.

    nice python bench/convert_vs_tts.py --runs 2 [--version cosyvoice3] [--json out.json]

TTS: the prompt's features, the LLM forced to 250 tokens (every stop id masked, as the pipeline benchmark
does), flow and vocoder. Conversion: ``model.convert`` of a 10 s espeak-ng recording (decoding, speech
detection, the speech tokenizer stand-in, flow and vocoder; no LLM). The ratio TTS / conversion is what to read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile
import torch

from cosyvoice_mac.bench.measure import TEXT, forced_token_stream, synthetic_prompt
from cosyvoice_mac.pipeline import CosyVoice

SECONDS = 10.0


def _timed(function):
    wall, cpu = time.perf_counter(), time.process_time()
    value = function()
    return time.perf_counter() - wall, time.process_time() - cpu, value


def speech_source(folder: Path, seconds: float = SECONDS) -> Path:
    """``seconds`` of espeak-ng speech (repeated sentences), or the synthetic voice where espeak-ng is missing."""
    path = folder / f"source-{seconds:g}.wav"
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        soundfile.write(path, synthetic_prompt(seconds), 24000)
        return path
    raw = folder / "raw.wav"
    text = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."
    subprocess.run([espeak, "-w", str(raw), text], check=True, capture_output=True)
    samples, rate = soundfile.read(raw, dtype="float32")
    samples = np.tile(samples, int(np.ceil(seconds * rate / len(samples))))[: int(seconds * rate)]
    soundfile.write(path, samples, rate)
    return path


def tts_once(model: CosyVoice, prompt: np.ndarray) -> tuple[float, float]:
    def run():
        speaker = model.prepare_prompt(prompt, sample_rate=24000)
        text_ids = torch.tensor([model.tokenizer.encode(TEXT)])[:, :32]
        tokens = list(forced_token_stream(model, text_ids, speaker, int(SECONDS * 25)))
        return model._tokens_to_wave(tokens, speaker, 1.0, {}, None, [])

    wall, cpu, wave = _timed(run)
    assert abs(len(wave) / 24000 - SECONDS) < 0.05
    return wall, cpu


def convert_once(model: CosyVoice, source: Path, prompt: np.ndarray, seconds: float = SECONDS) -> tuple[float, float]:
    def run():
        speaker = model.prepare_prompt(prompt, sample_rate=24000)
        return np.concatenate([piece.audio for piece in model.convert(str(source), speaker)])

    wall, cpu, wave = _timed(run)
    assert abs(len(wave) / 24000 - seconds) < 0.05
    return wall, cpu


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    model = CosyVoice.random_full_size(args.version, device="cpu", precision="float32")
    prompt = synthetic_prompt()
    with tempfile.TemporaryDirectory() as folder:
        source = speech_source(Path(folder))
        convert_once(model, speech_source(Path(folder), 2.0), prompt, 2.0)  # warm-up: kernels, the speech detector
        rows = []
        for _ in range(args.runs):  # interleaved, so the machine's load falls on both alike
            rows.append({"tts": tts_once(model, prompt), "convert": convert_once(model, source, prompt)})
    tts_wall = float(np.median([row["tts"][0] for row in rows]))
    convert_wall = float(np.median([row["convert"][0] for row in rows]))
    report = {
        "version": args.version,
        "audio_s": SECONDS,
        "runs": rows,
        "tts_wall_s": tts_wall,
        "convert_wall_s": convert_wall,
        "tts_cpu_s": float(np.median([row["tts"][1] for row in rows])),
        "convert_cpu_s": float(np.median([row["convert"][1] for row in rows])),
        "tts_over_convert_wall": tts_wall / convert_wall,
        "load_average": os.getloadavg(),
        "threads": torch.get_num_threads(),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
