"""The official ONNX prompt frontends (speech tokenizer, CAM++) on each onnxruntime execution provider.

    python bench/onnx_providers.py [--providers cpu,cuda] [--seconds 3,10] [--runs 5] [--json FILE]

Random-weight graphs of the released files' structure (``--frontends faithful``, the default:
:mod:`cosyvoice_mac.bench.faithful_frontends`, the S3 tokenizer's transformer and CAM++'s D-TDNN at their released
sizes), or stand-ins of the released files' sizes (``--frontends stand-in``: ``speech_tokenizer_v3.onnx`` 969 MB,
``campplus.onnx`` 28 MB, built as ``tests/fakes/random_folders.py`` builds them, the tiny graphs of
``tests/fakes/onnx_models.py`` grown with weight matrices that every call reads), are written once under
``<user cache>/bench/`` and reused; ``--folder`` takes a folder with the real files instead. Each provider opens
both through the app's own classes (``SpeechTokenizer``, ``SpeakerEncoder``) with ``$COSYVOICE_ONNX_PROVIDER`` set
to it, then encodes a synthetic prompt (a chirp plus noise, fixed seed) of each length: the first call, then
``--runs`` more.

Per provider and model: seconds to open the session (the first CUDA one also starts CUDA), the first call and
the median call (features + ``session.run``), the median ``session.run`` alone, and the provider the session
really uses. Against the first provider: tokens identical, largest embedding difference (at most 1e-4);
``fell_back`` lists the sessions that did not get the provider asked for.
The stand-ins' compute is not the real graphs' (one weight read per call, no attention): their times bound
what a provider costs around the weights; the faithful graphs' are the real encoders' arithmetic. JSON on
stdout; exit 1 when a check fails. When CUDA is asked for, ``onnxruntime.preload_dlls()`` (onnxruntime-gpu >=
1.21) loads CUDA and cuDNN from the nvidia pip packages first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package, not an installed one

from cosyvoice_mac.frontend.features import whisper_log_mel  # noqa: E402
from cosyvoice_mac.frontend.onnx_session import ACCELERATED, CPU, PROVIDER_ENV  # noqa: E402
from cosyvoice_mac.frontend.speaker import SpeakerEncoder, normalised_fbank  # noqa: E402
from cosyvoice_mac.frontend.speech_tokenizer import SpeechTokenizer, check_prompt_wave  # noqa: E402
from cosyvoice_mac.paths import user_cache_dir  # noqa: E402
from cosyvoice_mac.pipeline.fullsize import official_config  # noqa: E402
from cosyvoice_mac.pipeline.model_dir import SPEECH_TOKENIZER_FILES  # noqa: E402

SAMPLE_RATE = 16000
CAMPPLUS = "campplus.onnx"
COMPLETE = ".complete.json"  # written last: a folder without it is rebuilt
EMBEDDING_TOLERANCE = 1e-4


def write_stand_ins(version: str, folder: Path) -> dict:
    """The two ONNX stand-ins exactly as ``write_random_weight_folder`` writes them at released shapes."""
    from tests.fakes.onnx_models import write_fake_campplus, write_fake_speech_tokenizer
    from tests.fakes.random_folders import RELEASED_ONNX_BYTES, add_ballast

    started = time.perf_counter()
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    tokenizer = partial / SPEECH_TOKENIZER_FILES[version]
    write_fake_speech_tokenizer(tokenizer, vocab_size=int(official_config(version)["llm"]["speech_token_size"]))
    write_fake_campplus(partial / CAMPPLUS)
    for path in (tokenizer, partial / CAMPPLUS):
        add_ballast(path, RELEASED_ONNX_BYTES[path.name])
    sizes = {path.name: path.stat().st_size for path in sorted(partial.iterdir())}
    (partial / COMPLETE).write_text(json.dumps({"bytes": sizes, "write_s": time.perf_counter() - started}))
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return json.loads((folder / COMPLETE).read_text())


def stand_ins_folder(version: str, report: dict) -> Path:
    """The cached folder of ``version``'s full-size stand-ins, written on first use; ``report["stand_ins"]`` says
    where and what they hold."""
    folder = user_cache_dir() / "bench" / f"onnx-stand-ins-{version}"
    complete = folder / COMPLETE
    written = json.loads(complete.read_text()) if complete.is_file() else write_stand_ins(version, folder)
    report["stand_ins"] = {"folder": str(folder), **written}
    return folder


def frontends_folder(version: str, kind: str, report: dict) -> Path:
    """The cached folder of ``version``'s ``faithful`` graphs or size-only ``stand-in`` files; the report says which."""
    if kind == "stand-in":
        return stand_ins_folder(version, report)
    from cosyvoice_mac.bench.faithful_frontends import faithful_frontends_folder

    folder, record = faithful_frontends_folder(version)
    report["faithful"] = {"folder": str(folder), **record}
    return folder


def synthetic_prompt(seconds: float, seed: int = 0) -> torch.Tensor:
    """``(1, N)`` 16 kHz: a 100 Hz -> 4 kHz exponential chirp with a syllable envelope, plus noise."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    rate = np.log(4000 / 100) / seconds
    chirp = np.sin(2 * np.pi * 100 * np.expm1(rate * t) / rate)
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    noise = np.random.default_rng(seed).standard_normal(t.size)
    return torch.from_numpy((0.3 * chirp * envelope + 0.01 * noise).astype(np.float32)).unsqueeze(0)


def preload_cuda(onnxruntime) -> str:
    """Load CUDA/cuDNN from the nvidia pip packages where this onnxruntime can (its messages go to stderr)."""
    if not hasattr(onnxruntime, "preload_dlls"):
        return "absent"
    with contextlib.redirect_stdout(sys.stderr):
        onnxruntime.preload_dlls()
    return "called"


def timed(function) -> tuple[float, object]:
    started = time.perf_counter()
    value = function()
    return time.perf_counter() - started, value


def measure(open_model, call, run_only, prompts: dict[str, torch.Tensor], runs: int) -> tuple[dict, dict]:
    """(the timings, each prompt's output) of one model on one provider."""
    open_s, model = timed(open_model)
    row = {"open_s": open_s, "provider": model.provider, "reason": model.provider_reason, "prompts": {}}
    outputs = {}
    for name, wave in prompts.items():
        first_s, outputs[name] = timed(lambda: call(model, wave))
        calls = [timed(lambda: call(model, wave))[0] for _ in range(runs)]
        session_runs = [timed(lambda: run_only(model, wave))[0] for _ in range(runs)]
        row["prompts"][name] = {
            "first_call_s": first_s,
            "median_call_s": statistics.median(calls),
            "median_session_run_s": statistics.median(session_runs),
            "calls_s": calls,
            "output_size": int(outputs[name].numel()),
        }
    return row, outputs  # the session (and its device memory) goes with this frame, before the next one opens


def tokenizer_feeds(model: SpeechTokenizer, wave: torch.Tensor) -> dict:
    mel = whisper_log_mel(check_prompt_wave(wave))
    return {model._mel_input: mel.numpy(), model._length_input: np.array([mel.shape[2]], dtype=np.int32)}


def speaker_feeds(model: SpeakerEncoder, wave: torch.Tensor) -> dict:
    return {model._input: normalised_fbank(wave).unsqueeze(0).numpy()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--providers", default="cpu,cuda", help="comma-separated: cpu, cuda, coreml; first = reference")
    parser.add_argument("--seconds", default="3,10", help="comma-separated prompt lengths in seconds")
    parser.add_argument("--runs", type=int, default=5, help="timed calls after the first, per prompt")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (the app uses 1)")
    parser.add_argument("--version", default="cosyvoice3", choices=sorted(SPEECH_TOKENIZER_FILES))
    parser.add_argument("--folder", type=Path, help="a folder with the ONNX files (default: --frontends's, cached)")
    parser.add_argument("--frontends", choices=("faithful", "stand-in"), default="faithful")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    providers = [name.strip() for name in args.providers.split(",") if name.strip()]
    prompts = {f"{float(s):g}s": synthetic_prompt(float(s)) for s in args.seconds.split(",")}

    report: dict = {"version": args.version, "threads": args.threads, "runs": args.runs}
    folder = args.folder or frontends_folder(args.version, args.frontends, report)
    tokenizer_path, campplus_path = folder / SPEECH_TOKENIZER_FILES[args.version], folder / CAMPPLUS
    report["files"] = {str(path): path.stat().st_size for path in (tokenizer_path, campplus_path)}

    import onnxruntime

    report["preload_dlls"] = preload_cuda(onnxruntime) if "cuda" in providers else "not needed"
    report["onnxruntime"] = onnxruntime.__version__
    report["available_providers"] = onnxruntime.get_available_providers()
    report["host"] = {"machine": platform.machine(), "cpus": os.cpu_count(), "load_average": os.getloadavg()[0]}
    if "cuda" in providers and torch.cuda.is_available():
        report["host"]["gpu"] = torch.cuda.get_device_name()

    vocab_size = int(official_config(args.version)["llm"]["speech_token_size"])
    models = {
        "speech_tokenizer": (
            lambda device: SpeechTokenizer(tokenizer_path, args.threads, vocab_size, device_type=device),
            lambda model, wave: model.tokens(wave),
            lambda model, wave: model._session.run(None, tokenizer_feeds(model, wave)),
        ),
        "speaker_encoder": (
            lambda device: SpeakerEncoder(campplus_path, args.threads, device_type=device),
            lambda model, wave: model.embedding(wave),
            lambda model, wave: model._session.run(None, speaker_feeds(model, wave)),
        ),
    }
    results: dict = {}
    outputs: dict = {}
    setting = os.environ.get(PROVIDER_ENV)
    try:
        for provider in providers:  # one provider's sessions at a time
            os.environ[PROVIDER_ENV] = provider
            device = "cuda" if provider == "cuda" else "cpu"
            results[provider], outputs[provider] = {}, {}
            for model_name, (make, call, run_only) in models.items():
                row, out = measure(lambda: make(device), call, run_only, prompts, args.runs)
                results[provider][model_name], outputs[provider][model_name] = row, out
                summary = {key: value for key, value in row.items() if key != "prompts"}
                print(provider, model_name, json.dumps(summary), file=sys.stderr, flush=True)
    finally:
        if setting is None:
            os.environ.pop(PROVIDER_ENV, None)
        else:
            os.environ[PROVIDER_ENV] = setting
    report["results"] = results

    reference = providers[0]
    parity = {}
    for provider in providers[1:]:
        tokens, speaker = outputs[provider]["speech_tokenizer"], outputs[provider]["speaker_encoder"]
        tokens0, speaker0 = outputs[reference]["speech_tokenizer"], outputs[reference]["speaker_encoder"]
        identical = {name: bool(torch.equal(tokens[name], tokens0[name])) for name in prompts}
        difference = {name: float((speaker[name] - speaker0[name]).abs().max()) for name in prompts}
        parity[provider] = {
            "against": reference,
            "tokens_identical": identical,
            "embedding_max_abs_diff": difference,
            "ok": all(identical.values()) and max(difference.values()) <= EMBEDDING_TOLERANCE,
        }
    report["parity"] = parity
    asked = {provider: ACCELERATED.get(provider, CPU) for provider in providers}
    report["fell_back"] = [  # a session that did not get the provider asked for (e.g. CUDA libraries missing)
        f"{provider}/{name}"
        for provider, rows in results.items()
        for name, row in rows.items()
        if row["provider"] != asked[provider]
    ]
    report["ok"] = all(row["ok"] for row in parity.values()) and not report["fell_back"]
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
