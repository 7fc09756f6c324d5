"""Real Core ML predictions on a Mac: every compute unit against torch (marked ``mac``; skipped elsewhere).

Run on a Mac with ``python -m pytest -q -m mac tests/test_coreml_mac.py -rs``. The packages are
converted from speech-like random full-size vocoders (and from ``models/<folder>`` when a real model
is there); each prediction is compared with the torch graphs they were converted from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from cosyvoice_mac.coreml.runtime import COMPUTE_UNITS, coreml_unavailable_reason

_REASON = coreml_unavailable_reason()
pytestmark = [pytest.mark.mac, pytest.mark.skipif(_REASON is not None, reason=f"needs Core ML: {_REASON}")]

# fp16 on the GPU / Neural Engine: the numpy storage model gives ~50 dB on these weights; real
# kernels accumulate differently, so the bar is lower. fp32 f0 on CPU / GPU must stay near exact.
FP16_SNR_DB = {"ALL": 35.0, "CPU_AND_GPU": 35.0, "CPU_AND_NE": 35.0, "CPU_ONLY": 40.0}
F0_SNR_DB = 80.0
REAL_MODELS = Path(__file__).resolve().parents[1] / "models"


def _core_ml_model(path, units):
    import coremltools as ct

    return ct.models.MLModel(str(path), compute_units=ct.ComputeUnit[units])


@pytest.mark.parametrize("units", COMPUTE_UNITS)
@pytest.mark.parametrize("version", ["cosyvoice3", "cosyvoice2"])
def test_decoder_and_f0_predictions_match_torch(version, units):
    from tests.coreml.models import converted, snr_db, speechlike_hift
    from tests.test_coreml_convert import decoder_inputs

    folder, manifest = converted(version, "full", "fp16")
    hift = speechlike_hift(version)
    packages = manifest["packages"]
    key = "decoder_chunked" if units == "CPU_AND_NE" else "decoder_flexible"
    frames = packages["decoder_chunked"]["frames"] if key == "decoder_chunked" else 100
    mel, polyphase, expected = decoder_inputs(hift, frames)
    model = _core_ml_model(folder / packages[key]["file"], units)
    actual = model.predict({"mel": mel, "source_polyphase": polyphase})["overlap_added"]
    snr = snr_db(expected, actual)
    print(f"{version} {key} on {units}: {snr:.1f} dB")
    assert snr >= FP16_SNR_DB[units]

    from cosyvoice_mac.coreml.rewrite import build_graphs

    f0_graph, _ = build_graphs(hift)
    with torch.inference_mode():
        f0_expected = f0_graph(torch.from_numpy(mel)).numpy()
    f0_units = "CPU_ONLY" if units in ("CPU_AND_NE", "CPU_ONLY") else "CPU_AND_GPU"
    f0 = _core_ml_model(folder / packages["f0"]["file"], f0_units).predict({"mel": mel})["f0"]
    assert snr_db(f0_expected, f0) >= F0_SNR_DB


@pytest.mark.parametrize("units", COMPUTE_UNITS)
def test_core_ml_vocoder_matches_the_torch_split_vocoder(units):
    from cosyvoice_mac.coreml.runtime import load_vocoder
    from cosyvoice_mac.coreml.split import torch_split_vocoder
    from cosyvoice_mac.models.vocoder import GaussianSourceNoise
    from tests.coreml.models import converted, snr_db, speechlike_hift, speechlike_mel

    folder, _ = converted("cosyvoice2", "full", "fp16")
    hift = speechlike_hift("cosyvoice2")
    vocoder, reason = load_vocoder("coreml", hift, units, out_dir=folder, convert=False)
    assert vocoder is not None, reason
    mel = speechlike_mel(300, seed=2)
    expected, _ = torch_split_vocoder(hift).inference(mel, noise=GaussianSourceNoise(seed=3))
    actual, _ = vocoder.inference(mel, noise=GaussianSourceNoise(seed=3))
    assert actual.shape == expected.shape
    assert snr_db(expected, actual) >= FP16_SNR_DB[units]


@pytest.mark.parametrize("folder_name", ["Fun-CosyVoice3-0.5B", "CosyVoice2-0.5B"])
def test_real_checkpoint_through_load_vocoder(folder_name, tmp_path):
    from cosyvoice_mac.coreml.runtime import load_vocoder
    from cosyvoice_mac.models.vocoder import load_hift
    from tests.coreml.models import snr_db, speechlike_mel

    model_dir = REAL_MODELS / folder_name
    if not (model_dir / "hift.pt").is_file():
        pytest.skip(f"{model_dir} is not downloaded (bash run.sh download)")
    vocoder, reason = load_vocoder("coreml", model_dir, "ALL", out_dir=tmp_path)
    assert vocoder is not None, reason
    version = "cosyvoice3" if "3" in folder_name else "cosyvoice2"
    hift = load_hift(model_dir / f"{version}.yaml", model_dir / "hift.pt")
    mel = speechlike_mel(250, seed=4)
    from cosyvoice_mac.models.vocoder import GaussianSourceNoise

    noise = (lambda: GaussianSourceNoise(seed=5)) if version == "cosyvoice2" else (lambda: None)
    expected, _ = hift.inference(mel, noise=noise())
    actual, _ = vocoder.inference(mel, noise=noise())
    snr = snr_db(expected, actual)
    print(f"{folder_name} real weights, Core ML ALL vs torch HiFT: {snr:.1f} dB")
    assert np.isfinite(actual.numpy()).all() and snr >= 25.0
