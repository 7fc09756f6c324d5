"""Random-weight ONNX frontends with the released graphs' structure, so that new-voice figures pay the encoders' cost.

A full-size random-weight model (``CosyVoice.random_full_size``) encodes a prompt with stand-ins of microseconds;
the released speech tokenizer v3 is a 242M-parameter transformer (969 MB), CAM++ a 6.8M-parameter D-TDNN. This
module exports :mod:`cosyvoice_mac.bench.faithful_s3` and :mod:`cosyvoice_mac.bench.faithful_campplus` with
seeded random weights through ``torch.onnx.export``, with the released files' names, inputs and outputs
(``feats`` float32 ``(1, 128, T)`` and ``feats_length`` int32 ``(1,)`` -> ``indices`` int32 ``(1, ceil(T / 4))``;
``input`` float32 ``(1, T, 80)`` -> ``embedding`` float32 ``(1, 192)``), so the app's own
:class:`~cosyvoice_mac.frontend.speech_tokenizer.SpeechTokenizer` and
:class:`~cosyvoice_mac.frontend.speaker.SpeakerEncoder` run them on onnxruntime as they run the released files.

    python -m cosyvoice_mac.bench.faithful_frontends --version cosyvoice3 --seconds 3,10 --runs 3

builds the files once per machine (under ``<user cache>/bench/``; the time it took is kept beside them) and times
each frontend per second of prompt audio. :func:`use_faithful_frontends` puts them into a loaded model.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from cosyvoice_mac.bench.faithful_campplus import CAMPLUS_SHAPE, CamPlusPlus, CamShape
from cosyvoice_mac.bench.faithful_s3 import S3_SHAPES, S3Shape, S3Tokenizer, parameter_count
from cosyvoice_mac.frontend.speaker import SpeakerEncoder
from cosyvoice_mac.frontend.speech_tokenizer import SpeechTokenizer
from cosyvoice_mac.paths import user_cache_dir
from cosyvoice_mac.pipeline.loading import OnDemand
from cosyvoice_mac.pipeline.model_dir import SPEECH_TOKENIZER_FILES

OPSET = 17  # LayerNormalization is one node from 17 on; onnxruntime >= 1.12 reads it
CAMPPLUS = "campplus.onnx"
COMPLETE = ".complete.json"  # written last: a folder without it is built again
STRUCTURE = 1  # raise when a module's graph changes, so cached files of the old structure are built again
SAMPLE_RATE = 16000
EXPORT_FRAMES = 300  # the example input the graphs are traced with (3 s); time is a dynamic axis


def export_speech_tokenizer(path: Path, shape: S3Shape, seed: int = 0) -> dict:
    """Write a random-weight S3 tokenizer of ``shape`` to ``path``: its parameters and the export's seconds."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = S3Tokenizer(shape).eval()
    mel = torch.randn(1, shape.mels, EXPORT_FRAMES)
    length = torch.tensor([EXPORT_FRAMES], dtype=torch.int32)
    axes = {"feats": {2: "T"}, "indices": {1: "T_tok"}}
    seconds = _export(model, (mel, length), path, ["feats", "feats_length"], ["indices"], axes)
    return {"parameters": parameter_count(model), "export_s": seconds, "bytes": path.stat().st_size}


def export_campplus(path: Path, shape: CamShape = CAMPLUS_SHAPE, seed: int = 0) -> dict:
    """Write a random-weight CAM++ of ``shape`` to ``path``: its parameters and the export's seconds."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = CamPlusPlus(shape).eval()
    fbank = torch.randn(1, EXPORT_FRAMES, shape.features)
    seconds = _export(model, (fbank,), path, ["input"], ["embedding"], {"input": {1: "T"}})
    return {"parameters": parameter_count(model), "export_s": seconds, "bytes": path.stat().st_size}


def _export(model, example: tuple, path: Path, inputs: list[str], outputs: list[str], axes: dict) -> float:
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
        # The TorchScript exporter (dynamo=False): weights embedded as raw bytes in one file, as the released
        # files hold them (onnx_mapping maps them from there), and no onnxscript needed.
        torch.onnx.export(
            model,
            example,
            str(path),
            dynamo=False,
            opset_version=OPSET,
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
            do_constant_folding=True,
        )
    return time.perf_counter() - started


def write_faithful_frontends(version: str, folder: Path, seed: int = 0) -> dict:
    """Write ``version``'s speech tokenizer and ``campplus.onnx`` into ``folder`` (a random-weight model folder or
    any other); returns what was written: each file's parameters, bytes and export seconds."""
    folder = Path(folder)
    tokenizer = folder / SPEECH_TOKENIZER_FILES[version]
    return {
        "version": version,
        "structure": STRUCTURE,
        "torch": torch.__version__,
        tokenizer.name: export_speech_tokenizer(tokenizer, S3_SHAPES[version], seed),
        CAMPPLUS: export_campplus(folder / CAMPPLUS, seed=seed),
    }


def faithful_frontends_folder(version: str) -> tuple[Path, dict]:
    """The cached folder of ``version``'s faithful frontends, built on first use (minutes on a 2-core CPU), and
    what it holds; two processes building at once each write a folder of their own and the first one kept wins."""
    folder = user_cache_dir() / "bench" / f"faithful-frontends-{version}-s{STRUCTURE}"
    complete = folder / COMPLETE
    if not complete.is_file():
        print(f"faithful frontends: building {folder} (once per machine) ...", file=sys.stderr, flush=True)
        partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        record = write_faithful_frontends(version, partial)
        (partial / COMPLETE).write_text(json.dumps(record, indent=1))
        if complete.is_file():  # another process finished first: keep its files (it may be reading them)
            shutil.rmtree(partial, ignore_errors=True)
        else:
            shutil.rmtree(folder, ignore_errors=True)  # what a build stopped before its marker left
            try:
                partial.rename(folder)
            except OSError:  # another process renamed its folder in between: the same files
                shutil.rmtree(partial, ignore_errors=True)
    return folder, json.loads(complete.read_text())


def use_faithful_frontends(model, folder: Path | None = None) -> dict:
    """Give ``model`` (a random-weight ``CosyVoice``) the faithful ONNX frontends in place of its stand-ins, loaded
    as a model folder's are (the app's classes, the networks' device, low-memory mode's load per call); returns
    the record of the files, with where they are."""
    if folder is None:
        folder, record = faithful_frontends_folder(model.version)
    else:
        record = json.loads((Path(folder) / COMPLETE).read_text()) if (Path(folder) / COMPLETE).is_file() else {}
    tokenizer_path, campplus_path = folder / SPEECH_TOKENIZER_FILES[model.version], folder / CAMPPLUS
    vocab = int(model.config["llm"]["speech_token_size"])
    low, on = bool(model.low_memory), model.device.type
    encoder = model.prompt_encoder
    encoder.speech_tokenizer = OnDemand(
        lambda: SpeechTokenizer(tokenizer_path, vocab_size=vocab, map_weights=low, device_type=on), keep_loaded=not low
    )
    encoder.speaker_encoder = OnDemand(
        lambda: SpeakerEncoder(campplus_path, map_weights=low, device_type=on), keep_loaded=not low
    )
    if not low:
        encoder.speech_tokenizer.get(), encoder.speaker_encoder.get()
    return {"folder": str(folder), **record}


def synthetic_wave(seconds: float, seed: int = 0) -> torch.Tensor:
    """``(1, N)`` 16 kHz speech-like test audio: harmonics of a moving pitch, a syllable envelope, a little noise."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    phase = 2 * np.pi * np.cumsum(120 + 30 * np.sin(2 * np.pi * 0.7 * t)) / SAMPLE_RATE
    voice = sum(np.sin(k * phase) / k for k in range(1, 12)) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2)
    noise = 0.01 * np.random.default_rng(seed).standard_normal(t.size)
    return torch.from_numpy((0.3 * voice / np.abs(voice).max() + noise).astype(np.float32)).unsqueeze(0)


def time_per_audio_second(folder: Path, version: str, seconds: list[float], runs: int, threads: int) -> dict:
    """Each frontend's median call (features + ``session.run``) per prompt length and per second of audio."""
    tokenizer = SpeechTokenizer(folder / SPEECH_TOKENIZER_FILES[version], threads, vocab_size=S3_SHAPES[version].codes)
    speaker = SpeakerEncoder(folder / CAMPPLUS, threads)
    rows: dict[str, dict] = {"speech_tokenizer": {}, "speaker_encoder": {}}
    for length in seconds:
        wave = synthetic_wave(length)
        for name, call in (("speech_tokenizer", tokenizer.tokens), ("speaker_encoder", speaker.embedding)):
            call(wave)  # the first call: onnxruntime's own allocations
            times, cpu_times = [], []
            for _ in range(runs):
                started, cpu = time.perf_counter(), time.process_time()
                output = call(wave)
                times.append(time.perf_counter() - started)
                cpu_times.append(time.process_time() - cpu)  # on a busy shared machine: less disturbed than wall
            median, median_cpu = statistics.median(times), statistics.median(cpu_times)
            rows[name][f"{length:g}s"] = {
                "median_s": median,
                "per_audio_second_s": median / length,
                "median_cpu_s": median_cpu,
                "per_audio_second_cpu_s": median_cpu / length,
                "runs_s": times,
                "output_shape": list(output.shape),
            }
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", default="cosyvoice3", choices=sorted(S3_SHAPES))
    parser.add_argument("--seconds", default="3,10", help="comma-separated prompt lengths")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (the app's: 1)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    folder, record = faithful_frontends_folder(args.version)
    report = {
        "version": args.version,
        "folder": str(folder),
        "built": record,
        "ready_s": time.perf_counter() - started,  # the build's time on a first run, the cache's read after
        "threads": args.threads,
        "load_average": os.getloadavg()[0],
        "frontends": time_per_audio_second(
            folder, args.version, [float(s) for s in args.seconds.split(",")], args.runs, args.threads
        ),
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
