"""Run the converted vocoder with Core ML, and decide whether it can run here at all.

``load_vocoder(kind, model, compute_units)`` is what the engine and UI call: it returns
``(vocoder, reason)`` with ``vocoder`` None whenever the torch vocoder must stay (not macOS,
coremltools missing, conversion or load failure) and ``reason`` saying why, in words for the user.
A returned :class:`CoreMLVocoder` has the pipeline's vocoder interface; if it raises during a job,
the pipeline finishes that job with torch (``CosyVoice._vocode``).

Compute units: ``ALL`` and ``CPU_AND_GPU`` run the flexible-length decoder; ``CPU_AND_NE`` runs the
fixed-size chunked decoder (the Neural Engine runs fixed shapes only) and the flexible one for mels
shorter than a chunk. The f0 graph is float32 and so never runs on the Neural Engine.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from cosyvoice_mac.models.vocoder import HiFTConfig
from cosyvoice_mac.settings import choices

from . import convert as conversion
from .convert import INPUT_MEL, INPUT_SOURCE, OUTPUT_F0, OUTPUT_WAVE, ConversionOptions
from .host import HostSource
from .split import Decoder, SplitVocoder

COMPUTE_UNITS = choices("compute_units")  # what coremltools' ComputeUnit accepts
VOCODER_KINDS = choices("vocoder")
MIN_MACOS = (13, 0)  # ML Program packages need macOS 13 (the default target is macOS 14)

# Loads a package for given compute units; returns an object with ``predict(dict) -> dict``.
ModelFactory = Callable[[Path, str], object]


def coreml_unavailable_reason(target: str = "macOS14") -> str | None:
    """Why Core ML cannot run on this machine, or None when it can."""
    if sys.platform != "darwin":
        return f"Core ML runs only on macOS (this is {platform.system() or sys.platform}); using the torch vocoder"
    release = platform.mac_ver()[0]
    needed = max(MIN_MACOS, (int(target.removeprefix("macOS")), 0))
    try:
        version = tuple(int(part) for part in release.split(".")[:2])
    except ValueError:
        version = ()
    if version and version < needed:
        return f"the Core ML vocoder needs macOS {needed[0]} or later (this is {release}); using the torch vocoder"
    try:
        import coremltools  # noqa: F401
    except ImportError:
        return "coremltools is missing (pip install 'coremltools==9.0'); using the torch vocoder"
    try:
        from coremltools.libcoremlpython import _MLModelProxy  # noqa: F401
    except ImportError as error:
        return f"this coremltools build cannot run models ({error}); using the torch vocoder"
    return None


def coreml_model_factory(path: Path, compute_units: str):
    """``coremltools.models.MLModel`` on the given compute units (macOS only)."""
    import coremltools as ct

    return ct.models.MLModel(str(path), compute_units=ct.ComputeUnit[compute_units])


class CoreMLVocoder(SplitVocoder):
    """The split vocoder whose graphs are Core ML models; owns the loaded models."""

    def __init__(
        self,
        folder: Path,
        manifest: dict,
        compute_units: str = "ALL",
        model_factory: ModelFactory = coreml_model_factory,
    ):
        if compute_units not in COMPUTE_UNITS:
            raise ValueError(f"compute units must be one of {', '.join(COMPUTE_UNITS)}, got {compute_units!r}")
        folder = Path(folder)
        packages = manifest["packages"]
        config = HiFTConfig.from_yaml(manifest["hift_config"])
        neural_engine = compute_units == "CPU_AND_NE"
        f0_units = "CPU_ONLY" if compute_units in ("CPU_AND_NE", "CPU_ONLY") else "CPU_AND_GPU"
        started = time.perf_counter()
        f0_model = model_factory(folder / packages["f0"]["file"], f0_units)
        flexible = chunked = None
        if "decoder_flexible" in packages:
            # The Neural Engine path only needs it for mels shorter than a chunk: CPU/GPU then.
            flexible_units = "CPU_AND_GPU" if neural_engine else compute_units
            entry = packages["decoder_flexible"]
            model = model_factory(folder / entry["file"], flexible_units)
            flexible = Decoder(_decode_with(model), max_frames=int(entry["max_frames"]))
        if neural_engine and "decoder_chunked" in packages:
            entry = packages["decoder_chunked"]
            model = model_factory(folder / entry["file"], compute_units)
            chunked = Decoder(_decode_with(model), frames=int(entry["frames"]))
        if flexible is None and chunked is None:
            raise ValueError(f"{folder} has no decoder package for compute units {compute_units}")
        super().__init__(
            config,
            HostSource.from_dict(manifest["host_source"]),
            _f0_with(f0_model),
            flexible=flexible,
            chunked=chunked,
            name=f"coreml-{compute_units}",
        )
        self.folder = folder
        self.compute_units = compute_units
        self.precision = manifest.get("precision")
        self.load_seconds = time.perf_counter() - started


def _f0_with(model) -> Callable[[np.ndarray], np.ndarray]:
    def f0(mel: np.ndarray) -> np.ndarray:
        return np.asarray(model.predict({INPUT_MEL: mel})[OUTPUT_F0], dtype=np.float32)

    return f0


def _decode_with(model) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def decode(mel: np.ndarray, source_polyphase: np.ndarray) -> np.ndarray:
        return np.asarray(model.predict({INPUT_MEL: mel, INPUT_SOURCE: source_polyphase})[OUTPUT_WAVE])

    return decode


def load_vocoder(
    kind: str,
    model,
    compute_units: str = "ALL",
    *,
    precision: str = "fp16",
    target: str = "macOS14",
    out_dir: str | Path | None = None,
    convert: bool = True,
    model_factory: ModelFactory | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> tuple[CoreMLVocoder | None, str]:
    """``(vocoder or None, reason)`` for the engine: None means keep the torch vocoder.

    ``model`` is a loaded ``CosyVoice`` pipeline, a model folder path, or a ``HiFT``. Packages
    are looked up next to the model (``<model>/coreml``) or in the user cache; missing or stale
    ones are converted first when ``convert`` (about a minute). ``model_factory`` replaces Core ML
    (tests run the packages with a numpy interpreter through it).
    """
    if kind not in VOCODER_KINDS:
        raise ValueError(f"vocoder must be one of {', '.join(VOCODER_KINDS)}, got {kind!r}")
    if compute_units not in COMPUTE_UNITS:
        raise ValueError(f"compute units must be one of {', '.join(COMPUTE_UNITS)}, got {compute_units!r}")
    if kind == "torch":
        return None, "torch vocoder selected"
    if model_factory is None:
        reason = coreml_unavailable_reason(target)
        if reason is not None:
            return None, reason
        model_factory = coreml_model_factory
    options = ConversionOptions(precision=precision, target=target, chunk_frames=None)
    model_dir, hift = _model_parts(model)
    try:
        folder, manifest = _packages_for(model_dir, hift, options, out_dir, convert, log)
    except Exception as error:  # conversion problems must leave the app on torch, with the reason
        return None, f"Core ML conversion failed ({type(error).__name__}: {error}); using the torch vocoder"
    if manifest is None:
        return None, f"no current Core ML vocoder in {folder} (convert it: python -m cosyvoice_mac coreml convert)"
    try:
        vocoder = CoreMLVocoder(folder, manifest, compute_units, model_factory)
    except Exception as error:
        return None, f"Core ML vocoder failed to load ({type(error).__name__}: {error}); using the torch vocoder"
    return vocoder, f"Core ML vocoder ({precision}, {compute_units}) loaded from {folder}"


def _packages_for(model_dir, hift, options: ConversionOptions, out_dir, convert: bool, log) -> tuple[Path, dict | None]:
    """Find current packages for a folder or a HiFT, converting them if allowed: (folder, manifest or None)."""
    if model_dir is not None:
        if convert:
            return conversion.convert_model_dir(model_dir, out_dir, options, log=log)
        fingerprint, _ = conversion.model_fingerprint(model_dir)
        folder = Path(out_dir) if out_dir is not None else conversion.default_output_dir(model_dir, fingerprint)
        manifest = conversion.read_manifest(folder, options)
        return folder, manifest if conversion.stale_reason(manifest, fingerprint, options, folder) is None else None
    fingerprint = conversion.hift_fingerprint(hift)
    folder = Path(out_dir) if out_dir is not None else conversion.default_output_dir(None, fingerprint)
    manifest = conversion.read_manifest(folder, options)
    reason = conversion.stale_reason(manifest, fingerprint, options, folder)
    if reason is None:
        return folder, manifest
    if not convert:
        return folder, None
    log(f"converting the in-memory vocoder to Core ML ({reason}) into {folder}")
    node = conversion.hift_config_node(hift.config)
    return folder, conversion.convert_hift(
        hift, folder, fingerprint=fingerprint, config_node=node, options=options, log=log
    )


def _model_parts(model):
    """(model folder or None, HiFT or None) of a pipeline, a folder path or a HiFT."""
    from cosyvoice_mac.models.vocoder import HiFT

    if isinstance(model, (str, Path)):
        return Path(model), None
    if isinstance(model, HiFT):
        return None, model
    folder = getattr(model, "folder", None)
    networks = getattr(model, "networks", None)
    if folder is not None and getattr(folder, "path", None) is not None:
        return Path(folder.path), None
    if networks is not None and isinstance(getattr(networks, "hift", None), HiFT):
        return None, networks.hift
    raise TypeError(f"load_vocoder takes a CosyVoice pipeline, a model folder or a HiFT, got {type(model).__name__}")
