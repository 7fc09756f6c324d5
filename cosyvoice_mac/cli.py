"""Command line: ``python -m cosyvoice_mac synth --model DIR --prompt-wav F --text T --out F.wav``."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def _add_synth(commands) -> None:
    synth = commands.add_parser("synth", help="speak text in the voice of a prompt recording")
    source = synth.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=Path, help="model folder (e.g. models/Fun-CosyVoice3-0.5B)")
    source.add_argument(
        "--random-weights", choices=("cosyvoice3", "cosyvoice2"),
        help="build the full-size architecture with RANDOM weights (benchmarks only: the audio is noise)",
    )
    synth.add_argument("--prompt-wav", type=Path, required=True, help="3-30 s of speech in the target voice")
    synth.add_argument("--text", required=True, help="text to speak")
    synth.add_argument("--prompt-text", help="transcript of the prompt (zero-shot mode)")
    synth.add_argument("--instruct", help='instruction, e.g. "speak sadly" or "用四川话说" (instruct mode)')
    synth.add_argument("--seed", type=int, help="sampling seed (the same seed gives the same audio)")
    synth.add_argument("--speed", type=float, default=1.0, help="0.5-2.0, 1.0 = natural")
    synth.add_argument("--device", default="auto", help="auto (mps, cuda, cpu), mps, cuda or cpu")
    synth.add_argument("--dtype", default=None, help="float32 (default), float16 or bfloat16")
    synth.add_argument("--stream", action="store_true", help="synthesise in chunks (prints time to first audio)")
    synth.add_argument("--vocoder", choices=("torch", "coreml"), default="torch",
                       help="coreml: run the vocoder with Core ML (macOS; converted on first use)")
    synth.add_argument("--compute-units", default="ALL", choices=("ALL", "CPU_AND_GPU", "CPU_AND_NE", "CPU_ONLY"),
                       help="where Core ML may run the vocoder")
    synth.add_argument("--out", type=Path, required=True, help="output WAV path")
    synth.set_defaults(handler=_synth)


def _synth(args) -> int:
    from cosyvoice_mac.audio import write_wav
    from cosyvoice_mac.pipeline import CosyVoice

    started = time.perf_counter()
    if args.model is not None:
        model = CosyVoice.from_pretrained(args.model, device=args.device, dtype=args.dtype)
    else:
        print(f"warning: {args.random_weights} with RANDOM weights: the output is noise", file=sys.stderr)
        model = CosyVoice.random_full_size(args.random_weights, device=args.device, dtype=args.dtype)
    print(f"loaded {model.model_id} on {model.device} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    if args.vocoder == "coreml":
        from cosyvoice_mac.coreml.runtime import load_vocoder

        vocoder, reason = load_vocoder("coreml", model, args.compute_units)
        model.use_vocoder(vocoder)
        print(f"vocoder: {'Core ML (' + args.compute_units + ')' if vocoder else 'torch, because ' + reason}",
              file=sys.stderr)
    pieces, tokens, seconds = [], 0, 0.0
    started = time.perf_counter()
    for result in model.synthesize(
        args.text, prompt_audio=args.prompt_wav, prompt_text=args.prompt_text, instruct=args.instruct,
        seed=args.seed, speed=args.speed, stream=args.stream,
    ):
        if not pieces and args.stream:
            print(f"first audio after {time.perf_counter() - started:.2f} s", file=sys.stderr)
        pieces.append(result.audio)
        seconds += result.seconds
        if result.is_final_chunk:
            tokens += result.speech_token_count
            print(f"[{result.segment_index + 1}/{result.segment_count}] seed {result.seed}: {result.text}",
                  file=sys.stderr)
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
    audio = np.concatenate(pieces)
    write_wav(args.out, audio, model.sample_rate)
    duration = len(audio) / model.sample_rate
    print(f"wrote {args.out} ({duration:.2f} s, {tokens} speech tokens, RTF {seconds / duration:.2f})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cosyvoice_mac", description="CosyVoice voice cloning")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_synth(commands)
    __import__("cosyvoice_mac.coreml.cli", fromlist=["add_coreml"]).add_coreml(commands)
    __import__("cosyvoice_mac.longform.cli", fromlist=["add_longform"]).add_longform(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from cosyvoice_mac.audio import AudioInputError
    from cosyvoice_mac.checkpoint import CheckpointError
    from cosyvoice_mac.config import ConfigError
    from cosyvoice_mac.device import DeviceError
    from cosyvoice_mac.pipeline.model_dir import ModelFolderError
    from cosyvoice_mac.engine.jobs import EngineError
    from cosyvoice_mac.longform import LongformError
    from cosyvoice_mac.pipeline.types import SynthesisError

    user_errors = (SynthesisError, AudioInputError, ModelFolderError, CheckpointError, ConfigError, DeviceError,
                   LongformError, EngineError)
    try:
        return args.handler(args)
    except user_errors as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
