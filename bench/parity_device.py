"""Parity of every stage with the golden vectors on an accelerator (CUDA here, MPS on a Mac).

    COSYVOICE_PARITY_DIR=../shared/parity python bench/parity_device.py --device cuda

The CI parity suite runs on the CPU; this runs the same comparisons with the models on ``--device``
and prints the max abs error of each (JSON), with the manifest tolerance beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

# Parity is proven in strict float32 (as tests/conftest.py does): the golden vectors are float32 runs, and
# precision="auto" may pick a 16-bit flow on this device.
os.environ.setdefault("COSYVOICE_PRECISION", "float32")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosyvoice_mac.config import read_yaml_config  # noqa: E402
from cosyvoice_mac.models.flow import Flow, FlowConfig  # noqa: E402
from cosyvoice_mac.models.llm import load_speech_lm  # noqa: E402
from cosyvoice_mac.models.vocoder import RecordedSourceNoise, load_hift  # noqa: E402
from cosyvoice_mac.pipeline.streaming import PromptPlan  # noqa: E402
from tests.parity import e2e  # noqa: E402
from tests.parity.common import TOLERANCE, ParityContext, parity_dir, versions_in_manifest  # noqa: E402


def _error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return (actual.detach().float().cpu() - expected.float().cpu()).abs().max().item()


@torch.inference_mode()
def stage_errors(ctx: ParityContext, device: torch.device) -> dict[str, float]:
    folder, version = ctx.model_dir, ctx.version
    config = read_yaml_config(folder / f"{version}.yaml", overrides={"qwen_pretrain_path": ""})
    inputs, errors = ctx.vectors("inputs"), {}

    llm = load_speech_lm(folder, config["llm"], mask_all_stop_ids_before_min_len=False).to(device)
    vectors = ctx.vectors("llm")
    errors["llm_logits_teacher_forced"] = _error(
        llm.teacher_forced_logits(vectors["lm_input_embeds"].to(device)), vectors["logits_teacher_forced"]
    )

    flow = Flow.from_checkpoint(FlowConfig.from_yaml(config["flow"]), folder / "flow.pt").to(device)
    vectors = ctx.vectors("flow")
    prompt = [inputs[name].to(device) for name in ("prompt_speech_token", "prompt_feat", "embedding")]
    tokens = inputs["flow_tokens"].to(device)
    chunk1 = ctx.case_params.stream_chunk1_tokens
    errors["flow_mel_nonstream"] = _error(flow.inference(tokens, *prompt), vectors["mel_nonstream"])
    errors["flow_mel_stream_chunk1"] = _error(
        flow.inference(tokens[:, :chunk1], *prompt, streaming=True, finalize=False), vectors["mel_stream_chunk1"]
    )
    prefix = flow.build_prefix(*prompt, tokens=ctx.case_params.prompt_prefix_tokens)
    errors["flow_mel_stream_chunk1_cached_prefix"] = _error(
        flow.inference(tokens[:, :chunk1], *prompt, streaming=True, finalize=False, prefix=prefix),
        vectors["mel_stream_chunk1"],
    )
    errors.update(first_chunk_graph_errors(flow, prompt, tokens))

    hift = load_hift(folder / f"{version}.yaml", folder / "hift.pt").to(device)
    vectors = ctx.vectors("hift")
    noise = vectors["callA_rand1_randn_like"] if version == "cosyvoice2" else vectors["fixed_sine_waves_prefix"]
    wave, _ = hift.inference(vectors["mel_in"].to(device), noise=RecordedSourceNoise(noise))
    errors["hift_wave"] = _error(wave, vectors["callA_wave"])
    return errors


def first_chunk_graph_errors(flow, prompt, tokens) -> dict:
    """The pipeline's first streamed chunk (prompt cut to its plan, cached prefix, first hop of 10) eagerly
    without a prefix, through the prefix, and as the CUDA graph (captured, then replayed): max abs differences."""
    plan = PromptPlan.for_prompt(prompt[0].shape[1], lookahead=flow.config.pre_lookahead_len)
    cut = [prompt[0][:, plan.cut :], prompt[1][:, 2 * plan.cut :], prompt[2]]
    first = tokens[:, : plan.first_hop + flow.config.pre_lookahead_len]
    os.environ["COSYVOICE_CUDA_GRAPHS"] = "0"
    full = flow.inference(first, *cut, streaming=True, finalize=False)
    prefix = flow.build_prefix(*cut, tokens=plan.prefix_tokens)
    eager = flow.inference(first, *cut, streaming=True, finalize=False, prefix=prefix)
    os.environ["COSYVOICE_CUDA_GRAPHS"] = "1"
    captured = flow.inference(first, *cut, streaming=True, finalize=False, prefix=prefix)
    replayed = flow.inference(first, *cut, streaming=True, finalize=False, prefix=prefix)
    return {
        "first_chunk_prefix_vs_full": _error(eager, full),
        "first_chunk_graph_captured_vs_eager": _error(captured, eager),
        "first_chunk_graph_replayed_vs_eager": _error(replayed, eager),
        "first_chunk_graph_captures": 0 if prefix.graphs is None else prefix.graphs.captures,  # None: not CUDA
        "first_chunk_graph_error": None if prefix.graphs is None else prefix.graphs.error,
    }


def e2e_result(ctx: ParityContext, device: torch.device) -> str:
    """The whole pipeline (text in, waveform out) on ``device``, the reference's draws replayed."""
    model = e2e._model(ctx).to(device)  # the cached model the e2e check uses
    try:
        e2e.check_synthesize(ctx)
        return "within tolerance"
    except AssertionError as error:
        return f"FAILED: {error}"
    finally:
        model.to("cpu")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--tf32",
        action="store_true",
        help="keep CUDA's TF32 matmuls/convs (the default for speed); off = strict fp32 parity",
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
    root = parity_dir()
    report = {
        "device": str(device),
        "torch": torch.__version__,
        "tf32": args.tf32,
        "tolerance": TOLERANCE,
        "versions": {},
    }
    for version in versions_in_manifest(root):
        ctx = ParityContext(root, version)
        results: dict = stage_errors(ctx, device)
        results["e2e_pipeline"] = e2e_result(ctx, device)
        report["versions"][version] = results
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
