"""Shared test set-up: polite CPU threading, and real speech samples made with espeak-ng.

Tests use speech, not sine waves: silence trimming, loudness and the speech models all behave
differently on tones. ``make_speech`` synthesises a sentence with espeak-ng (``bash run.sh test``
installs it on Debian/Ubuntu; ``brew install espeak-ng`` on macOS).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
from math import gcd
from pathlib import Path

# Before torch loads OpenMP: idle worker threads sleep instead of spinning on a shared machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("GOMP_SPINCOUNT", "0")  # no spinning at all: many test processes share two cores
os.environ.setdefault("KMP_BLOCKTIME", "0")
# A suite started in the background without job control (`bash run.sh test &` from a script) inherits
# SIGINT ignored, and so would every process a test starts: the Ctrl-C tests need it delivered.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Exact float32 unless a test asks for precision="auto" (it injects its timings): parity stays bit-for-bit.
os.environ.setdefault("COSYVOICE_PRECISION", "float32")
# The suite's models are random-weight folders and tone-making fakes: their takes fail the take check by design,
# and a retake would change the audio other tests compare bit for bit. The take-check tests ask for it per request.
os.environ.setdefault("COSYVOICE_TAKE_CHECK", "0")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import soundfile  # noqa: E402
import torch  # noqa: E402
from scipy.signal import resample_poly  # noqa: E402

import cosyvoice_mac  # noqa: E402,F401  (before torch: it sets PYTORCH_ENABLE_MPS_FALLBACK)

ESPEAK_RATE = 22050  # espeak-ng writes 16-bit mono WAV at this rate

# Under pytest-xdist (``bash run.sh test`` runs the suite on every core) the cores are shared between the
# workers: each takes its share, so two workers on two cores do not fight over four threads.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // WORKERS)))

# Tests that share an expensive fixture run on one xdist worker (``--dist loadgroup``): the folders whose
# session-wide app server every module uses go whole, and every other module stays together, so a module's
# fixtures (a model built once, an app started once) are made once however the suite is spread.
SHARED_SERVER_FOLDERS = ("api", "browser", "reliability")
# Modules that share a session-wide result too dear to make twice: the Core ML conversions (tests/coreml/models.py
# ``converted``, ~25 s of CPU for a version's packages) are made once for both when their modules share a worker.
SHARED_CACHE_GROUPS = {
    "test_coreml_convert.py": "coreml-conversions",
    "test_coreml_runtime.py": "coreml-conversions",
    "test_coreml_mac.py": "coreml-conversions",
    # Ray starts a cluster of processes: its modules share one worker, so two clusters never run at once.
    "test_cluster.py": "ray-cluster",
    "test_cluster_app.py": "ray-cluster",
}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    tests_root = Path(__file__).parent
    for item in items:
        relative = item.path.relative_to(tests_root)
        whole_folder = relative.parts[0] in SHARED_SERVER_FOLDERS and len(relative.parts) > 1
        group = relative.parts[0] if whole_folder else SHARED_CACHE_GROUPS.get(relative.as_posix(), relative.as_posix())
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def make_speech(tmp_path_factory):
    """Factory ``make_speech(text, seconds=None, sample_rate=22050, voice="en-us") -> Path`` of a mono PCM-16 WAV.

    ``seconds`` makes the clip exactly that long: the sentence is repeated and then cut. Clips are
    made once per session and shared, so treat the files as read-only.
    """
    espeak = shutil.which("espeak-ng")
    folder = tmp_path_factory.mktemp("speech")

    def make(text: str, seconds: float | None = None, sample_rate: int = ESPEAK_RATE, voice: str = "en-us") -> Path:
        key = f"{text}|{seconds}|{sample_rate}|{voice}"
        path = folder / f"{hashlib.sha1(key.encode()).hexdigest()[:16]}.wav"
        if path.exists():
            return path
        if espeak is None:
            pytest.fail(
                "espeak-ng is not installed, and the tests make their speech with it. "
                "Install it (sudo apt-get install espeak-ng / brew install espeak-ng) or run: bash run.sh test"
            )
        raw = folder / f"raw-{path.name}"
        subprocess.run([espeak, "-v", voice, "-w", str(raw), text], check=True, capture_output=True, timeout=60)
        samples, rate = soundfile.read(raw, dtype="float32")
        if seconds is not None:
            wanted = round(seconds * rate)
            samples = np.tile(samples, -(-wanted // len(samples)))[:wanted]
        if sample_rate != rate:
            divisor = gcd(sample_rate, rate)
            samples = resample_poly(samples, sample_rate // divisor, rate // divisor).astype(np.float32)
        soundfile.write(path, np.clip(samples, -1.0, 1.0), sample_rate, subtype="PCM_16")
        return path

    return make
