"""The model worker's imports stay light: librosa's filters and effects (numba, scipy, scikit-learn, pandas:
0.18 GB resident, measured) are not imported to encode a voice or synthesise, and the two librosa
operations the worker needs, written out, give librosa's results to the bit."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import librosa
import numpy as np
import pytest
import torch

from cosyvoice_mac.frontend.features import slaney_mel_filters, slaney_mel_frequencies
from cosyvoice_mac.sound.silence import sound_bounds

REPO = Path(__file__).resolve().parents[1]
HEAVY_MODULES = ("numba", "librosa.filters", "librosa.effects", "sklearn", "pandas")


@pytest.mark.parametrize(
    "sr, n_fft, n_mels, fmin, fmax",
    [
        (16000, 400, 128, 0.0, None),
        (24000, 1920, 80, 0.0, 8000.0),
        (24000, 1920, 80, 0.0, None),
        (22050, 1024, 80, 0.0, 8000.0),
    ],
)
@pytest.mark.parametrize("area_norm", [True, False])
def test_the_mel_filterbank_is_librosas_to_the_bit(sr, n_fft, n_mels, fmin, fmax, area_norm):
    ours = slaney_mel_filters(sr, n_fft, n_mels, fmin, fmax, area_norm=area_norm)
    theirs = librosa.filters.mel(
        sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax, norm="slaney" if area_norm else None
    )
    assert ours.dtype == torch.float32
    np.testing.assert_array_equal(ours.numpy(), theirs)


def test_the_mel_frequencies_are_librosas_to_the_bit():
    for count, fmin, fmax in ((42, 50.0, 12000.0), (130, 0.0, 8000.0), (82, 0.0, 11025.0)):
        np.testing.assert_array_equal(
            slaney_mel_frequencies(count, fmin, fmax), librosa.mel_frequencies(count, fmin=fmin, fmax=fmax)
        )


def test_sound_bounds_are_librosa_trims_indices():
    rng = np.random.default_rng(5)
    t = np.arange(16000 * 3) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    quiet = np.zeros(8000, np.float32)
    signals = [
        np.concatenate([quiet, tone, quiet]),
        np.concatenate([1e-4 * rng.standard_normal(5000).astype(np.float32), tone, quiet[:123]]),
        (rng.standard_normal(20011) * np.linspace(0, 1, 20011) ** 6).astype(np.float32),
        np.zeros(4000, np.float32),
    ]
    for samples in signals:
        for top_db, frame, hop in ((60, 440, 220), (40, 512, 128)):
            _, expected = librosa.effects.trim(samples, top_db=top_db, frame_length=frame, hop_length=hop)
            assert sound_bounds(samples, top_db, frame, hop) == tuple(int(i) for i in expected)


WORKER_PATH = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from cosyvoice_mac.engine.runtime import warmup_prompt
    from cosyvoice_mac.pipeline import CosyVoice
    from tests.fakes.onnx_models import make_tiny_model_dir

    model = CosyVoice.from_pretrained(make_tiny_model_dir("cosyvoice3", Path(sys.argv[1])), device="cpu")
    speaker = model.prepare_prompt(warmup_prompt(24000, 4.0), sample_rate=24000, transcript="A short prompt.")
    list(model.synthesize("Hello world.", speaker=speaker, seed=1))
    print(json.dumps(sorted(name for name in sys.modules if name.startswith(tuple(sys.argv[2:])))))
    """
)


PREVIEW_BANDS = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from cosyvoice_mac.preview import world_convert

    world_convert.band_powers(np.ones((4, 1025)))  # every analysis of the preview voice: the voice's mel bands
    world_convert.band_centres()  # every conversion: the band gains' interpolation
    print(json.dumps(sorted(name for name in sys.modules if name.startswith(tuple(sys.argv[1:])))))
    """
)


def test_the_preview_voices_mel_bands_import_no_heavy_audio_library():
    """The preview worker's WORLD conversion uses the written-out filterbank too (librosa cost each start 1-4 s)."""
    run = subprocess.run(
        [sys.executable, "-c", PREVIEW_BANDS, *HEAVY_MODULES], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []


def test_encoding_a_voice_and_synthesising_import_no_heavy_audio_library(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", WORKER_PATH, str(tmp_path), *HEAVY_MODULES],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []


GROW_THEN_SHRINK = "import sys, time; block = bytearray(200 * 2**20); sys.stdout.write('up\\n'); sys.stdout.flush(); "
GROW_THEN_SHRINK += (
    "sys.stdin.readline(); del block; sys.stdout.write('down\\n'); sys.stdout.flush(); sys.stdin.readline()"
)


@pytest.mark.skipif(sys.platform != "linux", reason="the kernel's peak (VmHWM) is read from /proc")
def test_the_peak_sampler_reports_each_phases_kernel_peak():
    from cosyvoice_mac.bench.memory import PeakSampler

    child = subprocess.Popen([sys.executable, "-c", GROW_THEN_SHRINK], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"up\n"
        sampler = PeakSampler(child.pid)
        grown = sampler.peak()
        child.stdin.write(b"\n")
        child.stdin.flush()
        assert child.stdout.readline() == b"down\n"
        shrunk = sampler.peak()  # this phase began at the grown size
        after = sampler.peak()  # this one at the shrunk size
        sampler.stop()
    finally:
        child.kill()
        child.wait()
    assert grown["worker_vm_hwm_mib"] > 200 and grown["rss_now_mib"] > 200
    assert shrunk["rss_now_mib"] < 100
    assert shrunk["worker_vm_hwm_mib"] > 200
    if sampler.hwm_resets:  # a phase's kernel peak starts from where the phase began, not the first peak
        assert after["worker_vm_hwm_mib"] < 100


def test_the_benchs_worker_factory_loads_as_on_an_8_gb_machine(tmp_path, monkeypatch):
    from cosyvoice_mac import device
    from cosyvoice_mac.bench.memory import from_pretrained_with_8_gib
    from tests.fakes.onnx_models import make_tiny_model_dir

    monkeypatch.delenv("COSYVOICE_LOW_MEMORY", raising=False)
    monkeypatch.setattr(device, "psutil", device.psutil)  # the factory replaces it in its process; undo here
    model = from_pretrained_with_8_gib(make_tiny_model_dir("cosyvoice3", tmp_path), device="cpu")
    assert model.low_memory and model.low_memory_choice.reason.startswith("auto: 8 GiB RAM <= 12 GiB")
