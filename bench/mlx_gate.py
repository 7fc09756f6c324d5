"""The MLX LLM precision gate, measured: every row against fp32 on a reduced CosyVoice3 LLM, MLX's CPU backend.

    python bench/mlx_gate.py [--layers 2] [--steps 24] [--json bench/results/mlx_gate/mlx_gate.json]

Model: CosyVoice3's LLM at its full width (Qwen2 0.5B: 896 wide, 4864 MLP, 14 query / 2 key-value heads,
the 151936-row text table and the 6761-id speech head) with ``--layers`` of its 24 transformer layers
and seeded random weights: quantisation groups see the real row widths, and the run takes minutes on two
busy cores (12 minutes at load 10). Fewer layers accumulate less rounding than 24: a row failing here is
not expected to pass at full size.
Requests: the two golden CosyVoice3 requests (text, prompt text, prompt speech + forced speech tokens).

Each row is measured with the PyTorch gate's metrics (``cosyvoice_mac.pipeline.gate``, tests/test_precision_gate.py):

* ``top25_same_set``: the share of steps whose top-25 id sets equal fp32's, over the teacher-forced
  positions (one causal pass) and ``--steps`` decoded steps per request (the KV cache, one id a step, every
  row fed fp32's ids). The gate's rule: at least ``MIN_TOP_K_AGREEMENT`` (95 %).
* ``token_agreement``: the share of decoded steps where the seeded RAS sampler (same seed, same history)
  draws fp32's id.
* ``mel_error`` / ``wave_error``: relative L2 error of the mel of the tiny golden CosyVoice3 flow and the
  waveform of its HiFT (both fp32) made from this row's drawn ids, against those made from fp32's (ids
  folded into the tiny flow's 512): what the drawn ids change in the audio.
* ``top25_overlap`` (mean share of fp32's top 25 kept, the earlier MLX figure), ``top1_same``, bytes.

Rows: fp32, fp16, bf16, and int8 / int4 (transformer layers quantised) at group sizes 32, 64 and 128.
``chosen_group_size``: per bit width, the group size with the highest ``top25_same_set`` (a tie: the
higher ``top25_overlap``, then the larger group, fewer scales). ``verdicts``: one per precision the app
offers, judged on the golden tiny LLM where the row runs there (16-bit rows: the PyTorch gate's own data),
else on the reduced one. ``cosyvoice_mac/mlx/llm_gate.py`` copies the verdicts and figures of this JSON;
tests/test_mlx_gate.py checks each row against it. Prints one JSON document and writes it to ``--json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import mlx.core as mx  # noqa: E402
import torch  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from cosyvoice_mac.config import read_yaml_config  # noqa: E402
from cosyvoice_mac.mlx.flow import MlxFlow  # noqa: E402
from cosyvoice_mac.mlx.hift import MlxHiFT  # noqa: E402
from cosyvoice_mac.mlx.llm_gate import MIN_TOP_K_AGREEMENT  # noqa: E402
from cosyvoice_mac.mlx.networks import apply_llm_precision, quantize_llm, randomize  # noqa: E402
from cosyvoice_mac.mlx.quality import top_k_agreement  # noqa: E402
from cosyvoice_mac.mlx.speech_lm import MlxSpeechLM, load_mlx_speech_lm  # noqa: E402
from cosyvoice_mac.models.flow import FlowConfig  # noqa: E402
from cosyvoice_mac.models.llm import SpeechLMConfig  # noqa: E402
from cosyvoice_mac.models.vocoder import HiFTConfig  # noqa: E402
from cosyvoice_mac.pipeline.fullsize import official_config  # noqa: E402
from cosyvoice_mac.pipeline.loading import qwen_config_for  # noqa: E402

DEFAULT_JSON = ROOT / "bench" / "results" / "mlx_gate" / "mlx_gate.json"
ROWS = ("fp16", "bf16", *(f"int{bits}@{group}" for bits in (8, 4) for group in (32, 64, 128)))
TOP_K = 25


def parity_dir() -> Path:
    configured = os.environ.get("COSYVOICE_PARITY_DIR")
    return Path(configured) if configured else ROOT.parent / "shared" / "parity"


def golden_requests(root: Path) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(text, prompt text, prompt speech ids, forced speech ids) of the CosyVoice3 llm and e2e vectors."""
    inputs = load_file(str(root / "cosyvoice3_tiny" / "vectors" / "inputs.safetensors"))
    e2e = load_file(str(root / "cosyvoice3_tiny" / "vectors" / "e2e.safetensors"))
    prompt = (inputs["prompt_text"], inputs["prompt_speech_token"])
    return [
        (inputs["text"], *prompt, inputs["forced_speech_tokens"]),
        (e2e["text"], *prompt, e2e["speech_tokens"]),
    ]


def same_top_k_sets(reference: torch.Tensor, candidate: torch.Tensor) -> torch.Tensor:
    """``(L, V)`` x 2 -> ``(L,)`` bool: the rows whose top-25 id sets are equal (the PyTorch gate's test)."""
    ours = reference.float().topk(TOP_K, dim=-1).indices.sort(dim=-1).values
    theirs = candidate.float().topk(TOP_K, dim=-1).indices.sort(dim=-1).values
    return (ours == theirs).all(dim=-1)


def reduced_config(layers: int) -> SpeechLMConfig:
    qwen = dataclasses.replace(qwen_config_for(None), num_hidden_layers=layers)
    return SpeechLMConfig.from_yaml(official_config("cosyvoice3")["llm"], qwen)


def run_requests(llm: MlxSpeechLM, requests, steps: int, seed: int, reference_ids: list[list[int]] | None) -> dict:
    """Teacher-forced logits, decoded log-probs (fed ``reference_ids``, else its own draws) and drawn ids."""
    forced, decoded, drawn = [], [], []
    stop_from = llm.config.speech_token_size  # ids >= S stop: masked for the draw, so every run is steps long
    for index, (text, prompt_text, prompt_speech, forced_ids) in enumerate(requests):
        speech = torch.cat([prompt_speech, forced_ids], dim=1)
        forced.append(llm.teacher_forced_logits(llm.build_prompt_embeddings(text, prompt_text, speech))[0])
        decoder = llm.start_decoding(llm.build_prompt_embeddings(text, prompt_text, prompt_speech), steps)
        sampler, history, rows, picks = llm.make_sampler(seed=seed + index), [], [], []
        for step in range(steps):
            logp = decoder.logp.clone()
            rows.append(logp)
            drawable = logp.clone()
            drawable[stop_from:] = float("-inf")
            picks.append(int(sampler(drawable, history, ())))
            fed = picks[-1] if reference_ids is None else reference_ids[index][step]
            history.append(fed)
            if step + 1 < steps:
                decoder.feed_queued(fed)
        decoded.append(torch.stack(rows))
        drawn.append(picks)
    return {"forced": forced, "decoded": decoded, "drawn": drawn}


class TinyVoice:
    """The golden tiny CosyVoice3 flow and HiFT in fp32 (MLX), and the golden prompt: speech ids -> (mel, wave)."""

    def __init__(self, root: Path):
        folder = root / "cosyvoice3_tiny"
        node = read_yaml_config(folder / "cosyvoice3.yaml", overrides={"qwen_pretrain_path": ""})
        self.flow = MlxFlow.from_checkpoint(FlowConfig.from_yaml(node["flow"]), folder / "flow.pt")
        self.hift = MlxHiFT.from_checkpoint(HiFTConfig.from_yaml(node["hift"]), folder / "hift.pt")
        self.inputs = load_file(str(folder / "vectors" / "inputs.safetensors"))
        self.vocab = self.flow.config.vocab_size

    def __call__(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.tensor([ids]) % self.vocab
        inputs = self.inputs
        mel = self.flow.inference(tokens, inputs["prompt_speech_token"], inputs["prompt_feat"], inputs["embedding"])
        return mel, self.hift.inference(mel)[0]


def relative_error(candidate: torch.Tensor, reference: torch.Tensor) -> float:
    return float((candidate - reference).norm() / reference.norm())


def compare(reference: dict, candidate: dict, voice: TinyVoice, reference_audio: list) -> dict:
    """The row's figures against fp32's run."""
    same_forced = torch.cat([same_top_k_sets(r, c) for r, c in zip(reference["forced"], candidate["forced"])])
    same_decoded = torch.cat([same_top_k_sets(r, c) for r, c in zip(reference["decoded"], candidate["decoded"])])
    overlaps = [
        top_k_agreement(r, c)
        for r, c in zip(reference["forced"] + reference["decoded"], candidate["forced"] + candidate["decoded"])
    ]
    drawn_ref = [i for ids in reference["drawn"] for i in ids]
    drawn = [i for ids in candidate["drawn"] for i in ids]
    audio = [voice(ids) for ids in candidate["drawn"]]
    same_set = float(torch.cat([same_forced, same_decoded]).float().mean())
    return {
        "passes": same_set >= MIN_TOP_K_AGREEMENT,
        "top25_same_set": round(same_set, 4),
        "top25_same_set_teacher_forced": round(float(same_forced.float().mean()), 4),
        "top25_same_set_decoded": round(float(same_decoded.float().mean()), 4),
        "top25_overlap": round(min(o["mean"] for o in overlaps), 4),
        "top1_same": round(min(o["top1_same"] for o in overlaps), 4),
        "token_agreement": round(sum(a == b for a, b in zip(drawn_ref, drawn)) / len(drawn_ref), 4),
        "mel_error": max(relative_error(m, rm) for (m, _), (rm, _) in zip(audio, reference_audio)),
        "wave_error": max(relative_error(w, rw) for (_, w), (_, rw) in zip(audio, reference_audio)),
    }


def parameter_bytes(llm: MlxSpeechLM) -> int:
    return sum(array.nbytes for _, array in tree_flatten(llm.parameters()))


def in_precision(llm: MlxSpeechLM, row: str) -> MlxSpeechLM:
    """``llm`` (fp32) in ``row``'s precision, in place (``int8@64``: 8 bits, groups of 64)."""
    name, _, group = row.partition("@")
    if group:
        quantize_llm(llm, int(name.removeprefix("int")), int(group))
        llm.precision = name
    else:
        apply_llm_precision(llm, name)
    return llm


def measure(make_llm, rows: list[str], requests, steps: int, seed: int, voice: TinyVoice) -> dict:
    """Every row of ``rows`` against fp32 on the LLM that ``make_llm()`` builds afresh (fp32 weights)."""
    clock = time.perf_counter()
    reference_llm = make_llm()
    reference = run_requests(reference_llm, requests, steps, seed, None)
    reference_audio = [voice(ids) for ids in reference["drawn"]]
    measured = {
        "fp32": {
            "reference": True,
            "parameter_bytes": parameter_bytes(reference_llm),
            "seconds": round(time.perf_counter() - clock, 1),
        }
    }
    del reference_llm
    for row in rows:
        clock = time.perf_counter()
        llm = in_precision(make_llm(), row)
        candidate = run_requests(llm, requests, steps, seed, reference["drawn"])
        measured[row] = {
            **compare(reference, candidate, voice, reference_audio),
            "parameter_bytes": parameter_bytes(llm),
            "seconds": round(time.perf_counter() - clock, 1),
        }
        print(f"{row}: {measured[row]}", file=sys.stderr, flush=True)
        del llm
        mx.clear_cache()
    return measured


def chosen_group_sizes(rows: dict) -> dict[str, int]:
    """Per bit width, the group size with the highest top-25 same-set share (a tie: the higher top-25 overlap,
    then the larger group)."""
    chosen = {}
    for bits in ("int8", "int4"):
        measured = [
            (figures["top25_same_set"], figures["top25_overlap"], int(name.partition("@")[2]))
            for name, figures in rows.items()
            if name.startswith(f"{bits}@")
        ]
        if measured:
            chosen[bits] = max(measured)[-1]
    return chosen


def verdicts(golden: dict, reduced: dict, chosen: dict[str, int]) -> dict:
    """One verdict per precision the app offers: judged on the golden tiny LLM where the row runs there (the
    PyTorch gate's own data), else on the reduced LLM (quantised rows, at their chosen group size)."""
    out = {"fp32": {"passes": True, "judged_on": "reference", "top25_same_set": None, "group_size": 0}}
    for name in ("fp16", "bf16", "int8", "int4"):
        if name in golden:
            figures, judged_on, group = golden[name], "golden_tiny", 0
        elif name in chosen:
            group = chosen[name]
            figures, judged_on = reduced[f"{name}@{group}"], "reduced"
        else:
            continue
        out[name] = {
            "passes": figures["passes"],
            "judged_on": judged_on,
            "top25_same_set": figures["top25_same_set"],
            "group_size": group,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=2, help="transformer layers of the 24 (full width)")
    parser.add_argument("--steps", type=int, default=24, help="decoded steps per request")
    parser.add_argument("--rows", default=",".join(ROWS), help="e.g. fp16,bf16,int8@64")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=str(DEFAULT_JSON))
    args = parser.parse_args(argv)
    root, started = parity_dir(), time.perf_counter()
    requests, config, voice = golden_requests(root), reduced_config(args.layers), TinyVoice(root)
    rows = args.rows.split(",")

    seeded = MlxSpeechLM(config)
    randomize(seeded, args.seed)
    weights = list(tree_flatten(seeded.parameters()))
    del seeded

    def reduced_llm() -> MlxSpeechLM:
        llm = MlxSpeechLM(config)
        llm.load_weights(weights, strict=True)
        return llm

    tiny_node = read_yaml_config(root / "cosyvoice3_tiny" / "cosyvoice3.yaml", overrides={"qwen_pretrain_path": ""})
    golden = measure(
        lambda: load_mlx_speech_lm(root / "cosyvoice3_tiny", tiny_node["llm"]),
        [row for row in rows if "@" not in row],  # its layers are 8 wide: MLX groups at least 32 weights
        requests,
        args.steps,
        args.seed,
        voice,
    )
    reduced = measure(reduced_llm, rows, requests, args.steps, args.seed, voice)
    chosen = chosen_group_sizes(reduced)
    qwen = config.qwen
    report = {
        "what": "MLX LLM precisions against fp32 (bench/mlx_gate.py); the gate's rule: top25_same_set >= min",
        "rule": {"metric": "top25_same_set", "min": MIN_TOP_K_AGREEMENT, "top_k": TOP_K},
        "mlx": mx.__version__,
        "device": str(mx.default_device()),
        "cpu_count": os.cpu_count(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "requests": [{"prompt_ids": int(r[2].shape[1]), "forced_ids": int(r[3].shape[1])} for r in requests],
        "steps_per_request": args.steps,
        "seed": args.seed,
        "audio": "tiny golden CosyVoice3 flow + HiFT, fp32, ids folded into its vocabulary of 512",
        "models": {
            "golden_tiny": {"what": "the golden CosyVoice3 LLM (hidden 8): the PyTorch gate's data", "rows": golden},
            "reduced": {
                "what": "CosyVoice3 LLM at full width, reduced depth, seeded random weights",
                "layers": args.layers,
                "hidden": qwen.hidden_size,
                "intermediate": qwen.intermediate_size,
                "speech_vocab": config.speech_vocab_size,
                "rows": reduced,
            },
        },
        "chosen_group_size": chosen,
        "verdicts": verdicts(golden, reduced, chosen),
    }
    report["seconds"] = round(time.perf_counter() - started, 1)
    document = json.dumps(report, indent=1)
    print(document)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(document + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
