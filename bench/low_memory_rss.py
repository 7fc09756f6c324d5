"""Peak memory of the pipeline in the mode an 8 GB Mac gets, measured on this machine's CPU.

    python bench/low_memory_rss.py [--version cosyvoice3] [--tokens 250]

Full-size random weights in low-memory mode (what ``COSYVOICE_LOW_MEMORY`` auto picks at <= 12 GiB),
with both ONNX frontends as stand-ins of the real files' sizes (speech_tokenizer_v3.onnx 0.97 GB,
campplus.onnx 28 MB: the tests' fake graphs plus a weight table that each call reads), loaded on
demand as the app does. One new voice is encoded, then one sentence of ``--tokens`` speech tokens is
synthesised offline and one streamed. Prints JSON: RSS after load, peak RSS (``ru_maxrss``) after each
step, and whether an ONNX session stayed loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package, not an installed one

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import psutil  # noqa: E402
import torch  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from cosyvoice_mac.bench import REFERENCE_TEXT_IDS, TEXT, forced_token_stream, synthetic_prompt  # noqa: E402
from cosyvoice_mac.frontend.speaker import SpeakerEncoder  # noqa: E402
from cosyvoice_mac.frontend.speech_tokenizer import SpeechTokenizer  # noqa: E402
from cosyvoice_mac.pipeline.cosyvoice import CosyVoice  # noqa: E402
from cosyvoice_mac.pipeline.loading import OnDemand  # noqa: E402
from cosyvoice_mac.pipeline.speaker import PromptEncoder  # noqa: E402
from cosyvoice_mac.pipeline.streaming import stream_segment  # noqa: E402
from tests.fakes.onnx_models import write_fake_campplus, write_fake_speech_tokenizer  # noqa: E402

REAL_SIZES = {
    "speech_tokenizer_v3.onnx": 969_000_000,
    "speech_tokenizer_v2.onnx": 496_000_000,
    "campplus.onnx": 28_300_000,
}


def add_ballast(path: Path, total_bytes: int) -> Path:
    """Grow an ONNX model to ``total_bytes`` with a float table that every run reads (so it stays resident)."""
    model = onnx.load(str(path))
    graph = model.graph
    output = graph.output[0]
    raw = f"{output.name}_before_ballast"
    for node in graph.node:
        node.output[:] = [raw if name == output.name else name for name in node.output]
    rows = max(1, (total_bytes - path.stat().st_size) // 4)
    table = np.random.default_rng(0).standard_normal(rows).astype(np.float32)
    graph.initializer.extend(
        [
            numpy_helper.from_array(table, "ballast"),
            numpy_helper.from_array(np.array([-1], dtype=np.int64), "flat_shape"),
            numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
        ]
    )
    graph.node.extend(
        [
            helper.make_node("Cast", [raw], ["ballast_float"], to=TensorProto.FLOAT),
            helper.make_node("Reshape", ["ballast_float", "flat_shape"], ["ballast_flat"]),
            helper.make_node("ArgMax", ["ballast_flat"], ["ballast_index"], axis=0, keepdims=1),
            helper.make_node("Gather", ["ballast", "ballast_index"], ["ballast_row"]),
            helper.make_node("Mul", ["ballast_row", "zero"], ["ballast_zero"]),
            helper.make_node("Cast", ["ballast_zero"], ["ballast_cast"], to=output.type.tensor_type.elem_type),
            helper.make_node("Add", [raw, "ballast_cast"], [output.name]),
        ]
    )
    onnx.save(model, str(path))
    return path


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", default="cosyvoice3", choices=("cosyvoice3", "cosyvoice2"))
    parser.add_argument("--tokens", type=int, default=250, help="speech tokens per sentence (25 = 1 s)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="low-memory-rss-"))
    tokenizer_name = f"speech_tokenizer_v{args.version[-1]}.onnx"
    tokenizer_path = add_ballast(write_fake_speech_tokenizer(folder / tokenizer_name), REAL_SIZES[tokenizer_name])
    campplus_path = add_ballast(write_fake_campplus(folder / "campplus.onnx"), REAL_SIZES["campplus.onnx"])
    report = {
        "version": args.version,
        "onnx_bytes": {p.name: p.stat().st_size for p in (tokenizer_path, campplus_path)},
        "rss_before_load_mb": psutil.Process().memory_info().rss / 2**20,
    }

    model = CosyVoice.random_full_size(args.version, device="cpu", low_memory=True)
    model.prompt_encoder = PromptEncoder(  # the real wrappers, loaded only while a new voice is encoded
        OnDemand(lambda: SpeechTokenizer(tokenizer_path), keep_loaded=False),
        OnDemand(lambda: SpeakerEncoder(campplus_path), keep_loaded=False),
        fmax=model.prompt_encoder.fmax,
        model_id=model.model_id,
    )
    report.update(
        low_memory=model.low_memory,
        llm_dtype=str(next(model.networks.llm.llm_decoder.parameters()).dtype),
        rss_after_load_mb=psutil.Process().memory_info().rss / 2**20,
        peak_after_load_mb=peak_rss_mb(),
    )

    started = time.perf_counter()
    speaker = model.prepare_prompt(synthetic_prompt(), sample_rate=24000)
    encoder = model.prompt_encoder
    report.update(
        prompt_s=time.perf_counter() - started,
        peak_after_new_voice_mb=peak_rss_mb(),
        onnx_loaded_after_prompt=encoder.speech_tokenizer.loaded or encoder.speaker_encoder.loaded,
    )

    text_ids = torch.tensor([model.tokenizer.encode(TEXT)])[:, :REFERENCE_TEXT_IDS]
    with torch.inference_mode():
        started = time.perf_counter()
        tokens = list(forced_token_stream(model, text_ids, speaker, args.tokens))
        wave = model._tokens_to_wave(tokens, speaker, 1.0, {}, model._noise(0, 0), [])
        report.update(
            offline_s=time.perf_counter() - started, audio_s=len(wave) / 24000, peak_after_offline_mb=peak_rss_mb()
        )
        started = time.perf_counter()
        chunks = list(
            stream_segment(
                model.streaming_parts(),
                forced_token_stream(model, text_ids, speaker, args.tokens),
                speaker,
                model._noise(0, 0),
                lambda: False,
            )
        )
        report.update(
            streamed_s=time.perf_counter() - started, streamed_chunks=len(chunks), peak_after_streaming_mb=peak_rss_mb()
        )
    report["rss_end_mb"] = psutil.Process().memory_info().rss / 2**20
    report["target_mb"] = 3 * 1024
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
