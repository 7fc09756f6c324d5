"""``python -m cosyvoice_mac coreml convert``: write the Core ML vocoder packages for a model folder."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from cosyvoice_mac.settings import add_argument


def add_coreml(commands) -> None:
    """Register ``coreml convert`` on the main parser's subcommands (imports nothing heavy)."""
    coreml = commands.add_parser("coreml", help="Core ML vocoder for Apple GPUs and the Neural Engine")
    actions = coreml.add_subparsers(dest="coreml_command", required=True)
    convert = actions.add_parser(
        "convert",
        help="convert the model's HiFT vocoder to .mlpackage files (works on Linux too)",
        description="Writes hift_f0 (fp32) and hift_decoder (flexible length and fixed chunks) packages "
        "beside the model in coreml/ (or in the cache folder if the model folder is read-only). "
        "Current packages are kept; a changed hift.pt or config is converted again.",
    )
    source = convert.add_mutually_exclusive_group(required=True)
    add_argument(source, "coreml_model", dest="model")
    add_argument(source, "random_weights")
    add_argument(convert, "coreml_precision", dest="precision")
    add_argument(convert, "coreml_target", dest="target")
    add_argument(convert, "coreml_shapes", dest="shapes")
    add_argument(convert, "chunk_frames")
    convert.add_argument("--out", type=Path, help="output folder (default: <model>/coreml or the cache folder)")
    convert.add_argument("--force", action="store_true", help="convert even if current packages exist")
    convert.set_defaults(handler=_convert)


def _convert(args) -> int:
    from cosyvoice_mac.coreml.convert import ConversionOptions, CoreMLConversionError

    options = ConversionOptions(
        precision=args.precision,
        target=args.target,
        flexible=args.shapes in ("both", "flexible"),
        chunked=args.shapes in ("both", "chunked"),
        chunk_frames=args.chunk_frames,
    )
    started = time.perf_counter()
    log = lambda message: print(message, file=sys.stderr)  # noqa: E731
    try:
        options.validate()
        if args.model is not None:
            from cosyvoice_mac.coreml.convert import convert_model_dir

            folder, manifest = convert_model_dir(args.model, args.out, options, force=args.force, log=log)
        else:
            folder, manifest = _convert_random(args.random_weights, args.out, options, args.force, log)
    except (CoreMLConversionError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    summary = {
        "folder": str(folder),
        "packages": {key: entry["file"] for key, entry in manifest["packages"].items()},
        "fingerprint": manifest["fingerprint"],
        "precision": manifest["precision"],
        "target": manifest["target"],
        "conversion_seconds": manifest.get("seconds"),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(summary, indent=2))
    return 0


def _convert_random(version: str, out_dir, options, force: bool, log):
    import torch

    from cosyvoice_mac.coreml.convert import (
        convert_hift,
        default_output_dir,
        hift_fingerprint,
        read_manifest,
        stale_reason,
    )
    from cosyvoice_mac.models.vocoder import HiFT, HiFTConfig
    from cosyvoice_mac.pipeline.fullsize import official_config

    log(f"warning: {version} vocoder with RANDOM weights: its audio is noise")
    node = official_config(version)["hift"]
    torch.manual_seed(0)
    hift = HiFT(HiFTConfig.from_yaml(node)).eval()
    fingerprint = hift_fingerprint(hift)
    folder = Path(out_dir) if out_dir is not None else default_output_dir(None, fingerprint)
    manifest = read_manifest(folder, options)
    if not force and stale_reason(manifest, fingerprint, options, folder) is None:
        log(f"Core ML vocoder in {folder} is current")
        return folder, manifest
    return folder, convert_hift(hift, folder, fingerprint=fingerprint, config_node=node, options=options, log=log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cosyvoice_mac.cli.coreml")
    add_coreml(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
