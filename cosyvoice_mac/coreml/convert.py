"""Convert a HiFT vocoder to Core ML ``.mlpackage`` files with a manifest that pins their source.

Three packages per (precision, deployment target), written beside the model in ``coreml/`` (or in
the user cache folder when the model folder is read-only):

* ``hift_f0-v{N}-fp32-{target}.mlpackage``: mel -> f0, always float32, flexible length;
* ``hift_decoder-v{N}-{precision}-{target}-flex.mlpackage``: flexible length (GPU / CPU);
* ``hift_decoder-v{N}-{precision}-{target}-chunk{C}.mlpackage``: fixed ``C`` frames (Neural Engine).

``hift_coreml-v{N}-{precision}-{target}.json`` records the checkpoint fingerprint (sha256 of
``hift.pt`` and of the ``hift:`` yaml section), the library versions and everything the runtime
needs (the vocoder config, the source's ``l_linear``). A changed checkpoint, config or format
version makes the packages stale, and the runtime converts again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cosyvoice_mac.config import read_yaml_config
from cosyvoice_mac.models.vocoder import HiFT, HiFTConfig, load_hift
from cosyvoice_mac.paths import atomic_write, user_cache_dir
from cosyvoice_mac.pipeline.model_dir import model_yaml
from cosyvoice_mac.settings import choices, setting
from cosyvoice_mac.stored import read_json

from .host import HostSource
from .rewrite import POLYPHASE, DecoderGraph, F0Graph, build_graphs
from .split import CHUNK_CONTEXT, CHUNK_FRAMES

FORMAT_VERSION = 1
PRECISIONS = choices("coreml_precision")
TARGETS = choices("coreml_target")
F0_MAX_FRAMES = 15000  # 300 s, the length of CosyVoice3's fixed noise
DECODER_MAX_FRAMES = 3000  # 60 s per flexible call; longer mels are decoded in chunks
TRACE_FRAMES = 100
INPUT_MEL, INPUT_SOURCE = "mel", "source_polyphase"
OUTPUT_F0, OUTPUT_WAVE = "f0", "overlap_added"


class CoreMLConversionError(RuntimeError):
    """coremltools is missing or too new/old, or a conversion failed (the message says which)."""


@dataclass(frozen=True)
class ConversionOptions:
    """What to build: decoder precision, deployment target and which decoder shapes."""

    precision: str = setting("coreml_precision").default
    target: str = setting("coreml_target").default
    flexible: bool = True
    chunked: bool = True
    chunk_frames: int | None = CHUNK_FRAMES  # None: any recorded size will do (loading); 128 when converting
    max_frames: int = DECODER_MAX_FRAMES

    def validate(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {self.target!r}")
        if not (self.flexible or self.chunked):
            raise ValueError("convert at least one decoder shape (flexible or chunked)")

    @property
    def tag(self) -> str:
        return f"v{FORMAT_VERSION}-{self.precision}-{self.target}"


def import_coremltools():
    """coremltools, or :class:`CoreMLConversionError` saying how to install it."""
    try:
        import coremltools
    except ImportError as error:
        raise CoreMLConversionError(
            "coremltools is not installed: pip install 'coremltools==9.0' (numpy must stay below 2.4)"
        ) from error
    if tuple(int(part) for part in np.__version__.split(".")[:2]) >= (2, 4):
        raise CoreMLConversionError(f"coremltools 9.0 cannot convert with numpy {np.__version__}; install numpy<2.4")
    return coremltools


# fingerprints ---------------------------------------------------------------------------------
def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def config_sha256(node: dict) -> str:
    return hashlib.sha256(json.dumps(node, sort_keys=True, default=str).encode()).hexdigest()


def state_sha256(module: torch.nn.Module) -> str:
    """Fingerprint of in-memory weights (random-weight models have no checkpoint file)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


def hift_fingerprint(hift: HiFT) -> str:
    """Fingerprint of an in-memory vocoder (random-weight models have no checkpoint file)."""
    return f"state:{state_sha256(hift)};hift-config:{config_sha256(hift_config_node(hift.config))}"


def model_fingerprint(model_dir: Path) -> tuple[str, dict]:
    """(fingerprint, hift yaml node) of a model folder: sha256 of ``hift.pt`` and of the ``hift:`` node."""
    model_dir = Path(model_dir)
    node = read_yaml_config(model_yaml(model_dir)).get("hift")
    checkpoint = model_dir / "hift.pt"
    if not checkpoint.is_file():
        raise FileNotFoundError(f"{checkpoint} is missing: the Core ML vocoder is converted from it")
    return f"hift.pt:{file_sha256(checkpoint)};hift-config:{config_sha256(node)}", node


# where packages live --------------------------------------------------------------------------
def default_output_dir(model_dir: Path | None, fingerprint: str) -> Path:
    """``<model>/coreml`` when writable, else ``<user cache>/coreml/<fingerprint prefix>``."""
    if model_dir is not None:
        candidate = Path(model_dir) / "coreml"
        if _writable(candidate):
            return candidate
    key = hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
    return user_cache_dir() / "coreml" / key


def _writable(folder: Path) -> bool:
    existing = folder if folder.exists() else folder.parent
    return existing.is_dir() and os.access(existing, os.W_OK)


def manifest_path(out_dir: Path, options: ConversionOptions) -> Path:
    return Path(out_dir) / f"hift_coreml-{options.tag}.json"


def read_manifest(out_dir: Path, options: ConversionOptions) -> dict | None:
    path = manifest_path(out_dir, options)
    try:
        manifest = read_json(path)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None  # anything else: converted again


def stale_reason(manifest: dict | None, fingerprint: str, options: ConversionOptions, out_dir: Path) -> str | None:
    """Why the packages in ``out_dir`` cannot be used as they are (None: they are current)."""
    if manifest is None:
        return "not converted yet"
    if manifest.get("format_version") != FORMAT_VERSION:
        return f"package format {manifest.get('format_version')} != {FORMAT_VERSION}"
    if manifest.get("fingerprint") != fingerprint:
        return "the checkpoint or its config changed since conversion"
    wanted = (
        {"f0"}
        | ({"decoder_flexible"} if options.flexible else set())
        | ({"decoder_chunked"} if options.chunked else set())
    )
    packages = manifest.get("packages", {})
    for key in sorted(wanted):
        entry = packages.get(key)
        if entry is None or not (Path(out_dir) / entry["file"]).is_dir():
            return f"package {key} is missing"
        if key == "decoder_chunked" and options.chunk_frames and entry.get("frames") != options.chunk_frames:
            return f"chunk size {entry.get('frames')} != {options.chunk_frames}"
    return None


# conversion -----------------------------------------------------------------------------------
def convert_hift(
    hift: HiFT,
    out_dir: Path,
    *,
    fingerprint: str,
    config_node: dict,
    options: ConversionOptions = ConversionOptions(),
    log=print,
) -> dict:
    """Convert ``hift`` into ``out_dir`` and write the manifest last; returns the manifest.

    Packages are built in a temporary folder beside ``out_dir`` and moved in when all succeeded.
    """
    options.validate()
    ct = import_coremltools()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    f0_graph, decoder_graph = build_graphs(hift)
    config: HiFTConfig = hift.config
    tag = options.tag
    jobs = [("f0", f"hift_f0-v{FORMAT_VERSION}-fp32-{options.target}.mlpackage", {})]
    if options.flexible:
        jobs.append(("decoder_flexible", f"hift_decoder-{tag}-flex.mlpackage", {"max_frames": options.max_frames}))
    if options.chunked:
        left, right = CHUNK_CONTEXT[config.causal]
        chunk = options.chunk_frames or CHUNK_FRAMES
        if chunk - left - right < 1:
            raise ValueError(f"a {chunk}-frame chunk leaves no frames beside its {left} + {right} context frames")
        jobs.append(
            (
                "decoder_chunked",
                f"hift_decoder-{tag}-chunk{chunk}.mlpackage",
                {"frames": chunk, "context": [left, right]},
            )
        )
    packages, timings = {}, {}
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".converting-") as scratch:
        for key, file_name, extra in jobs:
            started = time.perf_counter()
            if key == "f0":
                model = convert_f0(ct, f0_graph, options.target)
            else:
                frames = extra.get("frames")
                model = convert_decoder(
                    ct, decoder_graph, options.precision, options.target, frames=frames, max_frames=options.max_frames
                )
            _describe(model, key, fingerprint, options, extra)
            model.save(str(Path(scratch) / file_name))
            timings[key] = round(time.perf_counter() - started, 2)
            log(f"converted {key} in {timings[key]:.1f} s -> {file_name}")
            packages[key] = {"file": file_name, **extra}
        for entry in packages.values():
            destination = out_dir / entry["file"]
            if destination.exists():
                shutil.rmtree(destination)
            os.replace(Path(scratch) / entry["file"], destination)
    manifest = {
        "format_version": FORMAT_VERSION,
        "fingerprint": fingerprint,
        "precision": options.precision,
        "target": options.target,
        "coremltools": ct.__version__,
        "torch": torch.__version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": timings,
        "hift_config": config_node,
        "host_source": HostSource.from_hift(hift).as_dict(),
        "io": {"inputs": [INPUT_MEL, INPUT_SOURCE], "f0_output": OUTPUT_F0, "decoder_output": OUTPUT_WAVE},
        "packages": packages,
    }
    path = manifest_path(out_dir, options)
    text = json.dumps(manifest, indent=2)
    atomic_write(path, text.encode("utf-8"))
    return json.loads(text)  # exactly what a later read_manifest() returns


def convert_model_dir(
    model_dir: Path,
    out_dir: Path | None = None,
    options: ConversionOptions = ConversionOptions(),
    *,
    force: bool = False,
    log=print,
) -> tuple[Path, dict]:
    """Convert a model folder's vocoder unless current packages exist; returns (folder, manifest)."""
    options.validate()
    fingerprint, node = model_fingerprint(model_dir)
    out_dir = Path(out_dir) if out_dir is not None else default_output_dir(model_dir, fingerprint)
    manifest = read_manifest(out_dir, options)
    reason = "forced" if force else stale_reason(manifest, fingerprint, options, out_dir)
    if reason is None:
        log(f"Core ML vocoder in {out_dir} is current")
        return out_dir, manifest
    log(f"converting the vocoder to Core ML ({reason}) into {out_dir}")
    hift = load_hift(model_yaml(model_dir), Path(model_dir) / "hift.pt")
    return out_dir, convert_hift(hift, out_dir, fingerprint=fingerprint, config_node=node, options=options, log=log)


def convert_f0(ct, graph: F0Graph, target: str):
    mel = torch.randn(1, graph.condnet[0].in_channels, TRACE_FRAMES)
    traced = _trace(graph, (mel,))
    return ct.convert(
        traced,
        convert_to="mlprogram",
        minimum_deployment_target=getattr(ct.target, target),
        compute_precision=ct.precision.FLOAT32,
        inputs=[
            ct.TensorType(
                INPUT_MEL, shape=(1, mel.shape[1], ct.RangeDim(1, F0_MAX_FRAMES, TRACE_FRAMES)), dtype=np.float32
            )
        ],
        outputs=[ct.TensorType(OUTPUT_F0, dtype=np.float32)],
    )


def _trace(graph: torch.nn.Module, inputs: tuple):
    """TorchScript trace (coremltools' best-tested capture; torch.export captures 2x slower here).

    Without torch's trace check: it runs the graph and the trace again on the trace's own example to compare them,
    three quarters of a full-size decoder's trace (6.0-6.7 -> 1.4-1.6 s of CPU on the 2-core EPYC, 2026-12-07) for
    every conversion. The graphs hold no data-dependent branch or random op for it to catch, and what a package
    computes is compared with the torch graph on other inputs by tests/test_coreml_convert.py (fp32 >= 100 dB).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.trace", category=DeprecationWarning)
        return torch.jit.trace(graph, inputs, check_trace=False)


def decoder_example(graph: DecoderGraph, frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Example inputs of a decoder call over ``frames`` mel frames."""
    config = graph.config
    rows = frames * config.samples_per_frame // POLYPHASE + config.n_fft // POLYPHASE
    return torch.randn(1, config.in_channels, frames), torch.rand(1, POLYPHASE, rows) * 0.2 - 0.1


def convert_decoder(ct, graph: DecoderGraph, precision: str, target: str, *, frames: int | None, max_frames: int):
    """Fixed ``frames`` (Neural Engine) or a flexible length up to ``max_frames`` (GPU / CPU)."""
    config = graph.config
    mel, source = decoder_example(graph, frames or TRACE_FRAMES)
    traced = _trace(graph, (mel, source))
    per_frame = config.samples_per_frame // POLYPHASE
    extra = config.n_fft // POLYPHASE
    if frames:
        mel_shape, source_shape = tuple(mel.shape), tuple(source.shape)
    else:
        mel_shape = (1, config.in_channels, ct.RangeDim(1, max_frames, TRACE_FRAMES))
        source_shape = (
            1,
            POLYPHASE,
            ct.RangeDim(per_frame + extra, per_frame * max_frames + extra, per_frame * TRACE_FRAMES + extra),
        )
    return ct.convert(
        traced,
        convert_to="mlprogram",
        minimum_deployment_target=getattr(ct.target, target),
        compute_precision=ct.precision.FLOAT16 if precision == "fp16" else ct.precision.FLOAT32,
        inputs=[
            ct.TensorType(INPUT_MEL, shape=mel_shape, dtype=np.float32),
            ct.TensorType(INPUT_SOURCE, shape=source_shape, dtype=np.float32),
        ],
        outputs=[ct.TensorType(OUTPUT_WAVE, dtype=np.float32)],
    )


def _describe(model, key: str, fingerprint: str, options: ConversionOptions, extra: dict) -> None:
    from cosyvoice_mac import __version__

    model.author = "cosyvoice-mac"
    model.short_description = {
        "f0": "HiFT f0 predictor: log-mel (1, 80, T) -> f0 Hz (1, T)",
        "decoder_flexible": "HiFT decoder: mel + polyphase source -> overlap-added iSTFT (polyphase)",
        "decoder_chunked": "HiFT decoder, fixed-size chunk: mel + polyphase source -> overlap-added iSTFT",
    }[key]
    model.version = f"{FORMAT_VERSION}"
    metadata = {
        "format_version": str(FORMAT_VERSION),
        "fingerprint": fingerprint,
        "role": key,
        "precision": "fp32" if key == "f0" else options.precision,
        "target": options.target,
        "cosyvoice_mac": __version__,
        **{name: json.dumps(value) for name, value in extra.items()},
    }
    model.user_defined_metadata.update(metadata)


def hift_config_node(config: HiFTConfig) -> dict:
    """A ``hift:`` yaml node that rebuilds ``config`` (for in-memory models without a yaml file)."""
    causal = config.causal
    return {
        "_tag": "new:cosyvoice.hifigan.generator." + ("CausalHiFTGenerator" if causal else "HiFTGenerator"),
        "in_channels": config.in_channels,
        "base_channels": config.base_channels,
        "nb_harmonics": config.nb_harmonics,
        "sampling_rate": config.sampling_rate,
        "nsf_alpha": config.nsf_alpha,
        "nsf_sigma": config.nsf_sigma,
        "nsf_voiced_threshold": config.nsf_voiced_threshold,
        "upsample_rates": list(config.upsample_rates),
        "upsample_kernel_sizes": list(config.upsample_kernel_sizes),
        "istft_params": {"n_fft": config.n_fft, "hop_len": config.hop_len},
        "resblock_kernel_sizes": list(config.resblock_kernel_sizes),
        "resblock_dilation_sizes": [list(d) for d in config.resblock_dilation_sizes],
        "source_resblock_kernel_sizes": list(config.source_resblock_kernel_sizes),
        "source_resblock_dilation_sizes": [list(d) for d in config.source_resblock_dilation_sizes],
        "lrelu_slope": config.lrelu_slope,
        "audio_limit": config.audio_limit,
        "conv_pre_look_right": config.conv_pre_look_right,
        "f0_predictor": {
            "_tag": "new:cosyvoice.hifigan.f0_predictor."
            + ("CausalConvRNNF0Predictor" if causal else "ConvRNNF0Predictor"),
            "num_class": config.f0_num_class,
            "in_channels": config.f0_in_channels,
            "cond_channels": config.f0_cond_channels,
        },
    }
