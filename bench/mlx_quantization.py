"""8-bit and 4-bit MLX LLM weights against fp32: top-25 agreement on the golden-vector requests, and memory.

    python bench/mlx_quantization.py [--precisions int8,int4,bf16] [--json out.json]

The tiny golden-vector LLM (hidden 8) cannot be quantized at all: MLX groups at least 32 weights per
scale and every one of its layers is 8 or 16 wide (reported as ``tiny_quantizable_layers``). So the
golden vectors' requests (their text, prompt text, prompt speech tokens and forced speech tokens) are
run teacher-forced through the FULL-SIZE CosyVoice3 LLM with seeded random weights, once per precision,
and each precision's logits are compared with fp32's. Random weights are not trained ones: a real-weight
gate must be run on the released model (docs/mac-checklist.md). Memory: parameter bytes and MLX's peak.
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx  # noqa: E402
import torch  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from cosyvoice_mac.config import read_yaml_config  # noqa: E402
from cosyvoice_mac.mlx.networks import apply_llm_precision, quantize_llm, randomize  # noqa: E402
from cosyvoice_mac.mlx.quality import top_k_agreement  # noqa: E402
from cosyvoice_mac.mlx.speech_lm import MlxSpeechLM, load_mlx_speech_lm  # noqa: E402
from cosyvoice_mac.models.llm import SpeechLMConfig  # noqa: E402
from cosyvoice_mac.pipeline.fullsize import official_config  # noqa: E402
from cosyvoice_mac.pipeline.loading import qwen_config_for  # noqa: E402


def parity_dir() -> Path:
    configured = os.environ.get("COSYVOICE_PARITY_DIR")
    return Path(configured) if configured else Path(__file__).resolve().parents[2] / "shared" / "parity"


def golden_requests(root: Path) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(text, prompt text, prompt speech + forced speech ids) of the CosyVoice3 llm and e2e vectors."""
    inputs = load_file(str(root / "cosyvoice3_tiny" / "vectors" / "inputs.safetensors"))
    e2e = load_file(str(root / "cosyvoice3_tiny" / "vectors" / "e2e.safetensors"))
    speech = torch.cat([inputs["prompt_speech_token"], inputs["forced_speech_tokens"]], dim=1)
    return [
        (inputs["text"], inputs["prompt_text"], speech),
        (e2e["text"], inputs["prompt_text"], torch.cat([inputs["prompt_speech_token"], e2e["speech_tokens"]], 1)),
    ]


def logits_of(llm: MlxSpeechLM, requests) -> list[torch.Tensor]:
    """Teacher-forced speech logits ``(L, V)`` of each request (every position)."""
    return [llm.teacher_forced_logits(llm.build_prompt_embeddings(*request))[0] for request in requests]


def parameter_bytes(llm: MlxSpeechLM) -> int:
    return sum(array.nbytes for _, array in tree_flatten(llm.parameters()))


def full_size_llm(seed: int) -> MlxSpeechLM:
    config = official_config("cosyvoice3")
    llm = MlxSpeechLM(SpeechLMConfig.from_yaml(config["llm"], qwen_config_for(None)))
    randomize(llm, seed)
    return llm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--precisions", default="int8,int4", help="e.g. fp16,bf16,int8,int8@32,int4@128 (@ group size)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    root = parity_dir()
    requests = golden_requests(root)

    tiny_node = read_yaml_config(root / "cosyvoice3_tiny" / "cosyvoice3.yaml", overrides={"qwen_pretrain_path": ""})
    tiny = load_mlx_speech_lm(root / "cosyvoice3_tiny", tiny_node["llm"])
    tiny_layers = sum(1 for _, m in tiny.named_modules() if m.__class__.__name__ in ("Linear", "Embedding"))
    tiny_skipped = len(quantize_llm(tiny, 8))
    del tiny

    report = {
        "model": "full-size CosyVoice3 LLM, seeded random weights",
        "mlx": mx.__version__,
        "device": str(mx.default_device()),
        "requests": [int(r[2].shape[1]) for r in requests],
        "tiny_quantizable_layers": tiny_layers - tiny_skipped,
        "tiny_layers": tiny_layers,
        "precisions": {},
    }
    mx.reset_peak_memory()
    reference_llm = full_size_llm(args.seed)
    report["precisions"]["fp32"] = {
        "parameter_bytes": parameter_bytes(reference_llm),
        "peak_bytes": mx.get_peak_memory(),
    }
    reference = logits_of(reference_llm, requests)
    del reference_llm
    for precision in args.precisions.split(","):
        gc.collect()
        mx.clear_cache()
        mx.reset_peak_memory()
        name, _, group = precision.partition("@")
        llm = full_size_llm(args.seed)
        if group:
            quantize_llm(llm, int(name.removeprefix("int")), int(group))
        else:
            apply_llm_precision(llm, name)
        candidate = logits_of(llm, requests)
        agreements = [top_k_agreement(r, c) for r, c in zip(reference, candidate)]
        report["precisions"][precision] = {
            "parameter_bytes": parameter_bytes(llm),
            "peak_bytes": mx.get_peak_memory(),
            "top25_mean": min(a["mean"] for a in agreements),
            "top25_worst": min(a["worst"] for a in agreements),
            "top1_same": min(a["top1_same"] for a in agreements),
            "per_request": agreements,
        }
        del llm
        if args.json:  # after every precision: a long run that is stopped keeps what it measured
            Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")
    document = json.dumps(report, indent=1)
    print(document)
    if args.json:
        Path(args.json).write_text(document, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
