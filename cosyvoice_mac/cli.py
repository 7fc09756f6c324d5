"""Command line: ``python -m cosyvoice_mac synth --model DIR --prompt-wav F --text T --out F.wav``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.longform.cli import add_post_arguments, post_settings
from cosyvoice_mac.preview.labels import PREVIEW_LABEL
from cosyvoice_mac.request import SPEED_RANGE


def _add_synth(commands) -> None:
    synth = commands.add_parser("synth", help="speak text in the voice of a prompt recording")
    source = synth.add_mutually_exclusive_group()
    source.add_argument(
        "--model",
        help="model folder, a folder name under models/, or 'preview' (default: as the "
        "app picks: a CosyVoice3 folder in models/, else any model, else the preview voice)",
    )
    source.add_argument(
        "--random-weights",
        choices=("cosyvoice3", "cosyvoice2"),
        help="build the full-size architecture with RANDOM weights (benchmarks only: the audio is noise)",
    )
    synth.add_argument("--prompt-wav", type=Path, required=True, help="3-30 s of speech in the target voice")
    synth.add_argument("--text", required=True, help="text to speak")
    synth.add_argument("--prompt-text", help="transcript of the prompt (zero-shot mode)")
    synth.add_argument("--instruct", help='instruction, e.g. "speak sadly" or "用四川话说" (instruct mode)')
    synth.add_argument("--seed", type=int, help="sampling seed (the same seed gives the same audio)")
    synth.add_argument("--speed", type=float, default=1.0, help=f"{SPEED_RANGE[0]:g}-{SPEED_RANGE[1]:g}, 1.0 = natural")
    synth.add_argument("--device", default="auto", help="auto (mps, cuda, cpu), mps, cuda or cpu")
    add_precision_arguments(synth)
    synth.add_argument("--stream", action="store_true", help="synthesise in chunks (prints time to first audio)")
    add_post_arguments(synth, "of the output")
    synth.add_argument(
        "--vocoder",
        choices=("torch", "coreml"),
        default="torch",
        help="coreml: run the vocoder with Core ML (macOS; converted on first use)",
    )
    synth.add_argument(
        "--compute-units",
        default="ALL",
        choices=("ALL", "CPU_AND_GPU", "CPU_AND_NE", "CPU_ONLY"),
        help="where Core ML may run the vocoder",
    )
    synth.add_argument("--out", type=Path, required=True, help="output WAV path")
    synth.set_defaults(handler=_synth)


def add_precision_arguments(parser) -> None:
    """--precision, --dtype (the LLM's), --llm-dtype, --flow-dtype, --reprobe: the CLI's and the app's."""
    parser.add_argument(
        "--precision",
        choices=("auto", "float32"),
        default=None,
        help="auto (default): each stage not named runs in the fastest dtype the quality gate "
        "allows here, measured once per machine; float32: every stage not named in float32",
    )
    parser.add_argument(
        "--dtype",
        default=None,
        help="the LLM's dtype (as $COSYVOICE_DTYPE): float32, float16, "
        "bfloat16 or int8; the flow keeps its own (see --flow-dtype)",
    )
    parser.add_argument("--llm-dtype", default=None, help="the LLM's dtype (wins over --dtype)")
    parser.add_argument("--flow-dtype", default=None, help="the flow's dtype: float32, float16 or bfloat16")
    parser.add_argument("--reprobe", action="store_true", help="measure this machine's precision timings again")


def precision_kwargs(args) -> dict:
    return {
        "precision": args.precision,
        "dtype": args.dtype,
        "llm_dtype": args.llm_dtype,
        "flow_dtype": args.flow_dtype,
        "reprobe": args.reprobe,
    }


def _request(args):
    """The request the page would queue for these arguments, checked before any model loads: a flag given
    asks for its mode, so ``--instruct ""`` is refused as the page refuses an empty instruction."""
    from cosyvoice_mac.request import Request, Voice

    mode = "instruct" if args.instruct is not None else "zero_shot" if args.prompt_text is not None else None
    return Request.build(
        args.text,
        Voice.recording(args.prompt_wav, transcript=args.prompt_text),
        mode=mode,
        instruct=args.instruct,
        seed=args.seed,
        speed=args.speed,
        stream=args.stream,
        post=post_settings(args),
    )


def _glossed(request):
    """The request with the user's pronunciation glossary applied (as the app's worker does), said on stderr."""
    from cosyvoice_mac.longform.glossary import RequestGlossary, glossary_store

    request, hits, note = RequestGlossary(glossary_store()).apply(request)
    for hit in hits:
        print(f"glossary: {hit['key']} -> {hit['replacement']} ({hit['count']}x)", file=sys.stderr)
    if note:
        print(f"note: {note}", file=sys.stderr)
    return request


def _load(args):
    from cosyvoice_mac.load import load_model
    from cosyvoice_mac.pipeline import CosyVoice

    if args.random_weights is not None:
        print(f"warning: {args.random_weights} with RANDOM weights: the output is noise", file=sys.stderr)
        return CosyVoice.random_full_size(args.random_weights, device=args.device, **precision_kwargs(args))
    options = precision_kwargs(args)
    model = load_model(args.model, device=args.device, dtype=options.pop("dtype"), **options)
    if model.version == "preview":
        print(f"note: {PREVIEW_LABEL} (no CosyVoice model folder in models/)", file=sys.stderr)
    return model


def _synth(args) -> int:
    from cosyvoice_mac.audio import write_wav
    from cosyvoice_mac.longform.post import post_process

    request = _glossed(_request(args))
    started = time.perf_counter()
    model = _load(args)
    print(f"loaded {model.model_id} on {model.device} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    if getattr(model, "precision", None) is not None:  # the preview voice has no stages to choose for
        print(f"precision: {model.precision.summary()}", file=sys.stderr)
    if args.vocoder == "coreml":
        from cosyvoice_mac.coreml.runtime import load_vocoder

        vocoder, reason = load_vocoder("coreml", model, args.compute_units)
        model.use_vocoder(vocoder)
        print(
            f"vocoder: {'Core ML (' + args.compute_units + ')' if vocoder else 'torch, because ' + reason}",
            file=sys.stderr,
        )
    pieces, tokens, seconds = [], 0, 0.0
    started = time.perf_counter()
    for result in model.run(request):
        if not pieces and args.stream:
            print(f"first audio after {time.perf_counter() - started:.2f} s", file=sys.stderr)
        pieces.append(result.audio)
        seconds += result.seconds
        if result.is_final_chunk:
            tokens += result.speech_token_count
            print(
                f"[{result.segment_index + 1}/{result.segment_count}] seed {result.seed}: {result.text}",
                file=sys.stderr,
            )
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
    audio, post = post_process(np.concatenate(pieces), model.sample_rate, request.post)
    for note in post.notes:
        print(f"post-processing: {note}", file=sys.stderr)
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
    try:
        return args.handler(args)
    except CosyVoiceError as error:  # ours: the message is written for the user
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
