"""CoreMLVocoder and load_vocoder: choosing Core ML or torch, converting when stale, running packages.

On Linux the saved packages run through the numpy MIL interpreter (``model_factory``), so the whole
runtime path (host source, polyphase I/O, chunking, envelope) is checked against the golden vectors.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cosyvoice_mac.config import read_yaml_config
from cosyvoice_mac.coreml import convert as convert_module
from cosyvoice_mac.coreml.runtime import COMPUTE_UNITS, CoreMLVocoder, coreml_unavailable_reason, load_vocoder
from cosyvoice_mac.models.vocoder import GaussianSourceNoise
from cosyvoice_mac.pipeline.cosyvoice import CosyVoice
from cosyvoice_mac.pipeline.model_dir import ModelFolderError
from tests.coreml.models import snr_db, speechlike_mel, tiny_dir, tiny_hift
from tests.fakes.onnx_models import make_tiny_model_dir
from tests.parity.common import assert_close


def _has_coremltools() -> bool:
    try:
        import coremltools  # noqa: F401
    except ImportError:
        return False
    return True


coremltools_required = pytest.mark.skipif(not _has_coremltools(), reason="coremltools is not installed")


def tiny_fp32(version: str):
    from tests.coreml.models import converted

    return converted(version, "tiny", "fp32", chunk_frames=64)


def interpreted(version: str, compute_units: str = "ALL") -> CoreMLVocoder:
    from tests.coreml.models import interpreter_factory

    folder, _ = tiny_fp32(version)
    vocoder, reason = load_vocoder(
        "coreml",
        tiny_dir(version),
        compute_units,
        precision="fp32",
        out_dir=folder,
        convert=False,
        model_factory=interpreter_factory,
    )
    assert vocoder is not None, reason
    return vocoder


# --- choosing ----------------------------------------------------------------------------------


def test_torch_kind_keeps_the_torch_vocoder():
    assert load_vocoder("torch", "/nonexistent") == (None, "torch vocoder selected")


def test_bad_kind_or_compute_units_are_refused():
    with pytest.raises(ValueError, match="coreml"):
        load_vocoder("onnx", "/nonexistent")
    with pytest.raises(ValueError, match="CPU_AND_NE"):
        load_vocoder("coreml", "/nonexistent", "NEURAL")


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the message off macOS")
def test_off_macos_core_ml_is_refused_with_the_reason():
    vocoder, reason = load_vocoder("coreml", tiny_dir("cosyvoice3"), "ALL")
    assert vocoder is None and "only on macOS" in reason and "torch" in reason
    assert coreml_unavailable_reason() == reason


def test_missing_coremltools_is_reported(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr("platform.mac_ver", lambda: ("14.5", ("", "", ""), "arm64"))
    monkeypatch.setitem(sys.modules, "coremltools", None)  # import fails
    reason = coreml_unavailable_reason()
    assert reason is not None and "coremltools is missing" in reason


def test_old_macos_is_reported(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr("platform.mac_ver", lambda: ("12.7", ("", "", ""), "arm64"))
    assert "macOS 14 or later" in coreml_unavailable_reason("macOS14")


def test_load_failure_leaves_torch_with_the_reason(tmp_path, monkeypatch):
    fake_conversion(monkeypatch)

    def broken(path, units):
        raise RuntimeError("compile failed")

    vocoder, reason = load_vocoder("coreml", copy_tiny_folder(tmp_path), "ALL", model_factory=broken)
    assert vocoder is None and "failed to load" in reason and "compile failed" in reason


def test_conversion_failure_leaves_torch_with_the_reason(tmp_path, monkeypatch):
    def failing(*args, **kwargs):
        raise convert_module.CoreMLConversionError("coremltools is not installed")

    monkeypatch.setattr(convert_module, "convert_hift", failing)
    vocoder, reason = load_vocoder("coreml", copy_tiny_folder(tmp_path), model_factory=lambda *a: None)
    assert vocoder is None and "conversion failed" in reason and "not installed" in reason


# --- staleness ----------------------------------------------------------------------------------


def copy_tiny_folder(tmp_path: Path, version: str = "cosyvoice2") -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    for name in (f"{version}.yaml", "hift.pt"):
        shutil.copy(tiny_dir(version) / name, folder / name)
    return folder


def fake_conversion(monkeypatch) -> list[Path]:
    """Replace coremltools conversion by empty package folders (the bookkeeping is what is tested)."""
    calls: list[Path] = []
    real = convert_module.convert_hift

    def fake(hift, out_dir, *, fingerprint, config_node, options, log=print):
        calls.append(Path(out_dir))
        monkeypatch.setattr(convert_module, "import_coremltools", lambda: SimpleNamespace(__version__="fake"))
        return real(hift, out_dir, fingerprint=fingerprint, config_node=config_node, options=options, log=log)

    class FakeModel:
        def __init__(self):
            self.user_defined_metadata = {}

        def save(self, path):
            Path(path).mkdir()

    monkeypatch.setattr(convert_module, "convert_hift", fake)
    monkeypatch.setattr(convert_module, "convert_f0", lambda *a, **k: FakeModel())
    monkeypatch.setattr(convert_module, "convert_decoder", lambda *a, **k: FakeModel())
    return calls


def test_packages_go_beside_the_model_and_are_converted_only_when_stale(tmp_path, monkeypatch):
    calls = fake_conversion(monkeypatch)
    folder = copy_tiny_folder(tmp_path)
    loaded = []
    factory = lambda path, units: loaded.append((path.name, units)) or SimpleNamespace()  # noqa: E731
    vocoder, reason = load_vocoder("coreml", folder, "CPU_AND_NE", model_factory=factory)
    assert vocoder is not None, reason
    assert calls == [folder / "coreml"] and vocoder.folder == folder / "coreml"
    manifest = json.loads(next((folder / "coreml").glob("hift_coreml-v*-fp16-macOS14.json")).read_text())
    assert manifest["fingerprint"].startswith("hift.pt:") and manifest["hift_config"]["_tag"].endswith("HiFTGenerator")
    assert {units for _, units in loaded} == {"CPU_ONLY", "CPU_AND_GPU", "CPU_AND_NE"}  # f0, short mels, chunks

    load_vocoder("coreml", folder, "ALL", model_factory=factory)
    assert len(calls) == 1, "current packages were converted again"

    state = torch.load(folder / "hift.pt", weights_only=True)
    key = next(iter(state))
    state[key] = state[key] + 1
    torch.save(state, folder / "hift.pt")
    load_vocoder("coreml", folder, "ALL", model_factory=factory)
    assert len(calls) == 2, "a changed checkpoint was not converted again"

    (folder / "coreml" / manifest["packages"]["f0"]["file"]).rmdir()
    load_vocoder("coreml", folder, "ALL", model_factory=factory)
    assert len(calls) == 3, "a missing package was not converted again"


def test_read_only_model_folders_convert_into_the_cache(tmp_path, monkeypatch):
    calls = fake_conversion(monkeypatch)
    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(convert_module, "_writable", lambda folder: False)
    vocoder, reason = load_vocoder("coreml", copy_tiny_folder(tmp_path), model_factory=lambda *a: SimpleNamespace())
    assert vocoder is not None, reason
    assert calls[0].parent == tmp_path / "cache" / "coreml"


def test_the_conversion_reads_the_yaml_of_the_folders_version(tmp_path):
    """Core ML takes a folder's version by the one rule (``model_dir.detect_version``): the CosyVoice2 folder's
    ``hift:`` node is fingerprinted, and a folder holding both YAMLs is refused, not read as CosyVoice3."""
    folder = copy_tiny_folder(tmp_path, "cosyvoice2")
    _, node = convert_module.model_fingerprint(folder)
    assert node == read_yaml_config(folder / "cosyvoice2.yaml")["hift"]
    shutil.copy(tiny_dir("cosyvoice3") / "cosyvoice3.yaml", folder / "cosyvoice3.yaml")
    with pytest.raises(ModelFolderError, match="holds both cosyvoice2.yaml and cosyvoice3.yaml"):
        convert_module.model_fingerprint(folder)


def test_pipeline_objects_and_in_memory_models_are_accepted(tmp_path, monkeypatch):
    calls = fake_conversion(monkeypatch)
    monkeypatch.setenv("COSYVOICE_CACHE_DIR", str(tmp_path / "cache"))
    factory = lambda *a: SimpleNamespace()  # noqa: E731
    pipeline = CosyVoice.from_pretrained(make_tiny_model_dir("cosyvoice3", tmp_path / "model"), device="cpu")
    assert load_vocoder("coreml", pipeline, model_factory=factory)[0] is not None
    assert calls[-1] == tmp_path / "model" / "coreml"  # a pipeline with a folder: its packages go beside it
    pipeline.folder = None  # as for random weights: only the in-memory HiFT is there to convert
    vocoder, reason = load_vocoder("coreml", pipeline, model_factory=factory)
    assert vocoder is not None, reason
    assert calls[-1].parent == tmp_path / "cache" / "coreml" and vocoder.config.causal
    with pytest.raises(TypeError):
        load_vocoder("coreml", 42, model_factory=factory)


# --- running saved packages (numpy interpreter) ---------------------------------------------------


@coremltools_required
@pytest.mark.parametrize("version", ["cosyvoice2", "cosyvoice3"])
def test_core_ml_vocoder_matches_golden_vectors(version):
    from tests.test_coreml_rewrite import golden_calls

    vocoder = interpreted(version)
    for call, mel, kwargs, (wave, source) in golden_calls(version):
        actual_wave, actual_source = vocoder.inference(mel, **kwargs)
        assert_close(actual_wave, wave, "waveform", f"{version} Core ML {call} wave")
        if source is not None:
            assert_close(actual_source, source, "waveform", f"{version} Core ML {call} source")


@coremltools_required
@pytest.mark.parametrize("version", ["cosyvoice2", "cosyvoice3"])
def test_neural_engine_chunks_equal_the_flexible_decoder(version):
    mel = speechlike_mel(150, seed=4)
    flexible = interpreted(version, "ALL")
    chunked = interpreted(version, "CPU_AND_NE")
    expected, _ = flexible.inference(mel, noise=GaussianSourceNoise(seed=1))
    actual, _ = chunked.inference(mel, noise=GaussianSourceNoise(seed=1))
    assert flexible.last_plan == [(150, 0)]
    assert len(chunked.last_plan) >= 3 and {size for size, _ in chunked.last_plan} == {64}
    assert snr_db(expected, actual) >= 100
    short, _ = chunked.inference(speechlike_mel(20), noise=GaussianSourceNoise(seed=1))
    assert chunked.last_plan == [(20, 0)] and short.shape == (1, 20 * 480)  # shorter than a chunk: flexible


def test_runtime_failure_is_finished_by_torch_in_the_pipeline(tmp_path):
    class Failing:
        def inference(self, mel, noise=None):
            raise RuntimeError("Core ML prediction failed")

    model = CosyVoice.from_pretrained(make_tiny_model_dir("cosyvoice2", tmp_path), device="cpu")
    model.use_vocoder(Failing())
    notes: list[str] = []
    mel = speechlike_mel(10)
    wave = model._vocode(mel, GaussianSourceNoise(seed=1), notes)
    expected, _ = model.networks.hift.inference(mel, noise=GaussianSourceNoise(seed=1))
    assert torch.equal(wave, expected) and model.vocoder_fallbacks == 1
    assert "Core ML prediction failed" in notes[0]


def test_bad_graph_outputs_raise_so_that_torch_takes_over():
    from cosyvoice_mac.coreml.host import HostSource
    from cosyvoice_mac.coreml.split import Decoder, SplitVocoder

    hift = tiny_hift("cosyvoice2")
    f0 = lambda mel: np.full((1, mel.shape[2]), 100.0, np.float32)  # noqa: E731
    nan = Decoder(lambda mel, source: np.full_like(source, np.nan))
    vocoder = SplitVocoder(hift.config, HostSource.from_hift(hift), f0, flexible=nan)
    with pytest.raises(FloatingPointError):
        vocoder.inference(speechlike_mel(5))
    short = Decoder(lambda mel, source: source[:, :, :-1])
    vocoder = SplitVocoder(hift.config, HostSource.from_hift(hift), f0, flexible=short)
    with pytest.raises(RuntimeError, match="shape"):
        vocoder.inference(speechlike_mel(5))


def test_compute_units_are_the_core_ml_names():
    assert COMPUTE_UNITS == ("ALL", "CPU_AND_GPU", "CPU_AND_NE", "CPU_ONLY")
