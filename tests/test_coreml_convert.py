"""Conversion to Core ML, checked on Linux: spec, op allowlist, proto reload, and saved-package numerics.

The saved packages are executed by our numpy MIL interpreter (tests/coreml/mil_interpreter.py):
fp32 packages must equal the torch graphs to >= 100 dB, fp16 ones to >= 45 dB (fp16 storage).
Full-size random-weight vocoders are converted once per session (CosyVoice3: all three packages;
CosyVoice2: f0 and the flexible decoder), the tiny parity models in fp32.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

pytest.importorskip("coremltools", reason="coremltools is not installed (pip install 'coremltools==9.0')")

from cosyvoice_mac.cli.coreml import main as coreml_cli  # noqa: E402
from cosyvoice_mac.coreml.convert import (  # noqa: E402
    DECODER_MAX_FRAMES,
    F0_MAX_FRAMES,
    FORMAT_VERSION,
    ConversionOptions,
    convert_hift,
    decoder_example,
)
from cosyvoice_mac.coreml.rewrite import build_graphs  # noqa: E402
from tests.coreml.mil_interpreter import SUPPORTED_OPS  # noqa: E402
from tests.coreml.models import (  # noqa: E402
    converted,
    interpreter,
    snr_db,
    speechlike_hift,
    speechlike_mel,
    tiny_dir,
    tiny_hift,
)

FP32_SNR_DB, FP16_SNR_DB = 100.0, 45.0
FORBIDDEN_OP = re.compile(r"random|cumsum|complex|stft|fft", re.IGNORECASE)
ALLOWED_OPS = {
    "f0": {"const", "cast", "conv", "pad", "elu", "linear", "transpose", "squeeze", "abs"},
    "decoder": {
        "const",
        "cast",
        "conv",
        "conv_transpose",
        "pad",
        "add",
        "mul",
        "real_div",
        "sin",
        "cos",
        "exp",
        "clip",
        "leaky_relu",
        "slice_by_index",
        "concat",
    },
}
FULL = [("cosyvoice3", True), ("cosyvoice2", False)]  # (version, with the chunked decoder)


def full_packages(version: str, chunked: bool):
    return converted(version, "full", "fp16", chunked=chunked)


def spec_of(package):
    import coremltools as ct

    return ct.models.MLModel(str(package), skip_model_load=True).get_spec()


def shape_range(feature) -> list[tuple[int, int]]:
    array = feature.type.multiArrayType
    return [(r.lowerBound, r.upperBound) for r in array.shapeRange.sizeRanges] or [(d, d) for d in array.shape]


@pytest.mark.parametrize(("version", "chunked"), FULL)
def test_full_size_conversion_writes_packages_and_manifest(version, chunked):
    folder, manifest = full_packages(version, chunked)
    assert json.loads(next(folder.glob("hift_coreml-*.json")).read_text()) == manifest
    assert manifest["format_version"] == FORMAT_VERSION and manifest["precision"] == "fp16"
    expected = {"f0", "decoder_flexible"} | ({"decoder_chunked"} if chunked else set())
    assert set(manifest["packages"]) == expected
    for entry in manifest["packages"].values():
        assert (folder / entry["file"]).is_dir() and f"v{FORMAT_VERSION}" in entry["file"]
    assert not list(folder.glob(".converting-*")), "the scratch folder was left behind"
    weights = folder / manifest["packages"]["decoder_flexible"]["file"] / "Data/com.apple.CoreML/weights/weight.bin"
    assert 30e6 < weights.stat().st_size < 40e6  # 17.5 M decoder parameters in fp16


@pytest.mark.parametrize(("version", "chunked"), FULL)
def test_specs_have_the_expected_inputs_outputs_and_ranges(version, chunked):
    folder, manifest = full_packages(version, chunked)
    packages = manifest["packages"]
    f0 = spec_of(folder / packages["f0"]["file"])
    assert f0.specificationVersion == 8  # macOS14
    assert [i.name for i in f0.description.input] == ["mel"] and [o.name for o in f0.description.output] == ["f0"]
    assert shape_range(f0.description.input[0]) == [(1, 1), (80, 80), (1, F0_MAX_FRAMES)]
    assert f0.description.output[0].type.multiArrayType.dataType == 65568  # FLOAT32
    decoders = {"decoder_flexible": [(1, 1), (80, 80), (1, DECODER_MAX_FRAMES)]}
    sources = {"decoder_flexible": [(1, 1), (4, 4), (124, 120 * DECODER_MAX_FRAMES + 4)]}
    if chunked:
        frames = packages["decoder_chunked"]["frames"]
        decoders["decoder_chunked"] = [(1, 1), (80, 80), (frames, frames)]
        sources["decoder_chunked"] = [(1, 1), (4, 4), (120 * frames + 4, 120 * frames + 4)]
    for key, mel_range in decoders.items():
        spec = spec_of(folder / packages[key]["file"])
        inputs, outputs = spec.description.input, spec.description.output
        assert [i.name for i in inputs] == ["mel", "source_polyphase"]
        assert [o.name for o in outputs] == ["overlap_added"]
        assert all(f.type.multiArrayType.dataType == 65568 for f in [*inputs, *outputs])  # fp32 I/O
        assert shape_range(inputs[0]) == mel_range and shape_range(inputs[1]) == sources[key]
        metadata = spec.description.metadata.userDefined
        assert metadata["fingerprint"] == manifest["fingerprint"] and metadata["role"] == key
        assert metadata["precision"] == "fp16" and metadata["com.github.apple.coremltools.version"] == "9.0"


@pytest.mark.parametrize(("version", "chunked"), FULL)
def test_saved_programs_reload_and_use_only_allowed_ops(version, chunked):
    folder, manifest = full_packages(version, chunked)
    for key, entry in manifest["packages"].items():
        # the milproto reload (it re-runs type inference: seconds) the interpreter that runs the package also uses
        function = interpreter(folder / entry["file"]).function
        op_types = {op.op_type for op in function.operations}
        assert not [op for op in op_types if FORBIDDEN_OP.search(op)], f"{key}: forbidden ops in {op_types}"
        allowed = ALLOWED_OPS["f0" if key == "f0" else "decoder"]
        assert op_types <= allowed, f"{key}: unexpected ops {sorted(op_types - allowed)}"
        assert op_types <= SUPPORTED_OPS
        if key == "f0":  # the f0 network stays float32: no fp16 anywhere
            assert "cast" not in op_types
            assert not any("fp16" in str(var.dtype) for op in function.operations for var in op.outputs)


def decoder_inputs(hift, frames: int, seed: int = 5):
    """Speech-like mel and a polyphase source made by the host from the vocoder's own f0."""
    from cosyvoice_mac.coreml.host import HostSource, pad_polyphase
    from cosyvoice_mac.models.vocoder import GaussianSourceNoise

    f0_graph, decoder = build_graphs(hift)
    mel = speechlike_mel(frames, seed=seed)
    with torch.inference_mode():
        f0 = f0_graph(mel)[0].numpy()
    source = HostSource.from_hift(hift)(f0, GaussianSourceNoise(seed=seed))
    polyphase = pad_polyphase(source, hift.config.n_fft)
    with torch.inference_mode():
        expected = decoder(mel, torch.from_numpy(polyphase)).numpy()
    return mel.numpy(), polyphase, expected


def run_decoder(package, mel, polyphase):
    return interpreter(package).predict({"mel": mel, "source_polyphase": polyphase})["overlap_added"]


@pytest.mark.parametrize(("version", "chunked"), FULL)
def test_fp16_decoder_packages_match_torch(version, chunked):
    folder, manifest = full_packages(version, chunked)
    hift = speechlike_hift(version)
    mel, polyphase, expected = decoder_inputs(hift, 24)
    actual = run_decoder(folder / manifest["packages"]["decoder_flexible"]["file"], mel, polyphase)
    assert actual.shape == expected.shape and np.abs(expected).max() > 0.05
    assert snr_db(expected, actual) >= FP16_SNR_DB
    if chunked:
        frames = manifest["packages"]["decoder_chunked"]["frames"]
        mel, polyphase, expected = decoder_inputs(hift, frames, seed=6)
        actual = run_decoder(folder / manifest["packages"]["decoder_chunked"]["file"], mel, polyphase)
        assert snr_db(expected, actual) >= FP16_SNR_DB


@pytest.mark.parametrize(("version", "chunked"), FULL)
def test_f0_packages_are_float32_exact(version, chunked):
    folder, manifest = full_packages(version, chunked)
    f0_graph, _ = build_graphs(speechlike_hift(version))
    mel = speechlike_mel(37, seed=2)
    with torch.inference_mode():
        expected = f0_graph(mel).numpy()
    actual = interpreter(folder / manifest["packages"]["f0"]["file"]).predict({"mel": mel.numpy()})["f0"]
    assert actual.shape == expected.shape == (1, 37)
    assert snr_db(expected, actual) >= FP32_SNR_DB


@pytest.mark.parametrize("version", ["cosyvoice3", "cosyvoice2"])
def test_fp32_packages_match_torch_to_100_db(version):
    folder, manifest = converted(version, "tiny", "fp32", chunk_frames=64)
    hift = tiny_hift(version)
    packages = manifest["packages"]
    for key, frames in (("decoder_flexible", 1), ("decoder_flexible", 29), ("decoder_chunked", 64)):
        mel, polyphase, expected = decoder_inputs(hift, frames)
        actual = run_decoder(folder / packages[key]["file"], mel, polyphase)
        assert snr_db(expected, actual) >= FP32_SNR_DB, key
    f0_graph, _ = build_graphs(hift)
    with torch.inference_mode():
        expected = f0_graph(torch.from_numpy(mel)).numpy()
    actual = interpreter(folder / packages["f0"]["file"]).predict({"mel": mel})["f0"]
    assert snr_db(expected, actual) >= FP32_SNR_DB


def test_cli_converts_a_model_folder_and_then_reuses_it(capsys):
    folder, manifest = converted("cosyvoice2", "tiny", "fp32", chunk_frames=64)  # through the command line
    assert manifest["fingerprint"].startswith("hift.pt:") and manifest["precision"] == "fp32"
    assert {entry["file"] for entry in manifest["packages"].values()} == {
        "hift_f0-v1-fp32-macOS14.mlpackage",
        "hift_decoder-v1-fp32-macOS14-flex.mlpackage",
        "hift_decoder-v1-fp32-macOS14-chunk64.mlpackage",
    }
    arguments = [
        "coreml",
        "convert",
        "--model",
        str(tiny_dir("cosyvoice2")),
        "--out",
        str(folder),
        "--precision",
        "fp32",
        "--chunk-frames",
        "64",
    ]
    capsys.readouterr()
    assert coreml_cli(arguments) == 0
    captured = capsys.readouterr()
    assert "is current" in captured.err
    summary = json.loads(captured.out)
    assert summary["fingerprint"] == manifest["fingerprint"] and summary["folder"] == str(folder)


def test_cli_reports_a_bad_model_folder(tmp_path, capsys):
    assert coreml_cli(["coreml", "convert", "--model", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "cosyvoice3.yaml" in capsys.readouterr().err


def test_conversion_rejects_bad_options(tmp_path):
    with pytest.raises(ValueError, match="precision"):
        convert_hift(
            tiny_hift("cosyvoice2"),
            tmp_path,
            fingerprint="x",
            config_node={},
            options=ConversionOptions(precision="int8"),
        )
    with pytest.raises(ValueError, match="target"):
        ConversionOptions(target="macOS12").validate()


def test_example_inputs_have_polyphase_shapes():
    _, decoder = build_graphs(tiny_hift("cosyvoice3"))
    mel, source = decoder_example(decoder, 7)
    assert mel.shape == (1, 80, 7) and source.shape == (1, 4, 120 * 7 + 4)
