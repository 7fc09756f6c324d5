"""Every aten op a synthesis runs has an MPS kernel in this torch (no silent per-op CPU fallback on a Mac).

The tiny models synthesise on the CPU along the MPS code path (conv windows, serialised device
turns, float32 f0: what MPS gets), both versions, streaming and not, under a ``TorchDispatchMode``.
Each recorded op is looked up in torch's own ``torchgen/packaged/ATen/native/native_functions.yaml``:
it passes with an ``MPS`` dispatch entry (following ``structured_delegate``) or a CompositeExplicit
kernel; a CompositeImplicit op is decomposed while recording and its parts are checked instead.
No op is exempt: the CPU-side work on a Mac (phase integral, noise draws) uses ops that have MPS
kernels anyway, so every recorded op is checked. The LLM thread of a streamed request is not recorded
(dispatch modes are per-thread); its ops are those of the non-streamed runs.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest
import torch
import torchgen
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

from cosyvoice_mac.device import MPS_CONV_LIMIT
from cosyvoice_mac.models.vocoder.f0 import F0Predictor
from cosyvoice_mac.pipeline import CosyVoice
from tests.fakes.onnx_models import make_tiny_model_dir

NATIVE_FUNCTIONS = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
TEXT = "Hello world, this is a test."
PROMPT_TEXT = "Hello there, this is a short prompt for testing."

# CompositeImplicit ops whose decomposition picks its kernel by device: on the CPU SDPA becomes
# _scaled_dot_product_flash_attention_for_cpu, on MPS this op; judge them by the MPS choice.
MPS_CHOICE = {"scaled_dot_product_attention.default": "_scaled_dot_product_attention_math_for_mps"}


@lru_cache(maxsize=1)
def native_functions() -> dict[str, dict]:
    """``name.overload`` (``name`` for the default overload) -> its yaml entry."""
    entries = yaml.load(NATIVE_FUNCTIONS.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return {entry["func"].split("(", 1)[0]: entry for entry in entries if "func" in entry}


def _dispatch_keys(entry: dict) -> set[str]:
    return {key.strip() for keys in entry.get("dispatch", {}) for key in keys.split(",")}


def mps_verdict(op_name: str) -> str:
    """'mps', 'composite-explicit', 'composite-implicit' or 'missing' for ``name.overload``."""
    if op_name in MPS_CHOICE:
        return mps_verdict(MPS_CHOICE[op_name])
    table = native_functions()
    entry = table.get(op_name) or table.get(op_name.removesuffix(".default"))
    if entry is None:
        return "missing"
    keys = _dispatch_keys(entry)
    if "MPS" in keys:
        return "mps"
    if any(key.startswith("CompositeExplicitAutograd") for key in keys):
        return "composite-explicit"
    if "structured_delegate" in entry:
        return mps_verdict(entry["structured_delegate"])
    if not keys or "CompositeImplicitAutograd" in keys:
        return "composite-implicit"
    return "missing"


class OpRecorder(TorchDispatchMode):
    """Records every aten op by ``name.overload``; CompositeImplicit ops are decomposed and recorded too."""

    def __init__(self):
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = f"{func.overloadpacket.__name__}.{func._overloadname}"
        self.ops.add(name)
        if mps_verdict(name) == "composite-implicit":
            with self:
                result = func.decompose(*args, **kwargs)
            if result is not NotImplemented:
                return result
        return func(*args, **kwargs)


def test_the_lookup_follows_the_yaml():
    assert mps_verdict("convolution.default") == "composite-explicit"
    assert mps_verdict("add.Tensor") == "mps"  # structured_delegate: add.out, which lists MPS
    assert mps_verdict("conv1d.default") == "composite-implicit"
    assert mps_verdict("_fft_r2c.default") == "mps"
    assert mps_verdict("_cudnn_rnn.default") == "missing"
    assert mps_verdict("_scaled_dot_product_flash_attention_for_cpu.default") == "missing"
    assert mps_verdict("scaled_dot_product_attention.default") == "mps"  # by its MPS choice


@pytest.fixture(scope="module")
def recorded_ops(tmp_path_factory, make_speech) -> dict[str, set[str]]:
    prompt = make_speech(PROMPT_TEXT, seconds=3.0)
    found: dict[str, set[str]] = {}
    patch = pytest.MonkeyPatch()
    patch.setenv("COSYVOICE_SERIAL_DEVICE", "1")
    patch.setattr(F0Predictor, "compute_dtype", lambda self, device: torch.float32)  # MPS has no float64
    try:
        for version in ("cosyvoice2", "cosyvoice3"):
            model = CosyVoice.from_pretrained(
                make_tiny_model_dir(version, tmp_path_factory.mktemp(version)), device="cpu"
            )
            model.networks.hift.conv_limit = MPS_CONV_LIMIT
            speaker = model.prepare_prompt(prompt, transcript=PROMPT_TEXT)
            for stream in (False, True):
                with OpRecorder() as recorder:
                    list(model.synthesize(TEXT, speaker=speaker, prompt_text=PROMPT_TEXT, seed=1, stream=stream))
                found[f"{version} stream={stream}"] = recorder.ops
    finally:
        patch.undo()
    return found


def ops_without_mps(ops: set[str]) -> list[str]:
    return sorted(op for op in ops if mps_verdict(op) == "missing")


MPS_MISSING = None if torch.backends.mps.is_available() else "needs MPS (macOS on Apple Silicon)"


@pytest.mark.mac
@pytest.mark.skipif(MPS_MISSING is not None, reason=MPS_MISSING or "")
@pytest.mark.parametrize("version", ["cosyvoice2", "cosyvoice3"])
def test_on_mps_a_synthesis_falls_back_to_the_cpu_for_no_op(version, tmp_path, make_speech):
    """What the recorded ops predict, on the real device: torch warns once per op it runs on the CPU instead
    (PYTORCH_ENABLE_MPS_FALLBACK is on), and no such warning comes, streamed or not."""
    import warnings

    model = CosyVoice.from_pretrained(make_tiny_model_dir(version, tmp_path), device="mps", engine="torch")
    speaker = model.prepare_prompt(make_speech(PROMPT_TEXT, seconds=3.0), transcript=PROMPT_TEXT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for stream in (False, True):
            chunks = list(model.synthesize(TEXT, speaker=speaker, prompt_text=PROMPT_TEXT, seed=1, stream=stream))
            assert sum(chunk.audio.size for chunk in chunks) > 0
    fallbacks = [str(warning.message) for warning in caught if "fall back to run on the CPU" in str(warning.message)]
    assert not fallbacks, fallbacks


def test_an_op_without_an_mps_kernel_is_named():
    """What a new op in the pipeline would do: torch.take and torch.mode have CPU/CUDA kernels only."""
    with OpRecorder() as recorder, torch.inference_mode():
        values = torch.arange(12.0).reshape(3, 4)
        torch.take(values, torch.tensor([0, 5])).add_(1)
        torch.mode(values, dim=1)
    assert ops_without_mps(recorder.ops) == ["mode.default", "take.default"]


def test_every_op_of_a_synthesis_has_an_mps_kernel(recorded_ops):
    problems = {}
    for run, ops in recorded_ops.items():
        assert len(ops) > 30, f"{run}: too few ops recorded ({len(ops)}): is the recorder on?"
        lacking = ops_without_mps(ops)
        if lacking:
            problems[run] = lacking
    assert not problems, f"ops without an MPS kernel in torch {torch.__version__}: {problems}"


class TurnWatch(TorchDispatchMode):
    """Entered on one thread: records the aten ops that thread runs outside a device turn while a streamed
    sentence's LLM is live (then the other thread may be issuing device work)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.outside: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.state.producers and not getattr(self.state.local, "in_turn", False):
            self.outside.add(f"{func.overloadpacket.__name__}.{func._overloadname}")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("version", ["cosyvoice2", "cosyvoice3"])
def test_every_op_of_a_streamed_request_runs_inside_a_device_turn(version, tmp_path, make_speech, monkeypatch):
    """On MPS two threads must never issue work at once: each thread's ops are watched by its own dispatch mode
    (modes are per-thread), the consumer's on the test's thread, the LLM's on the sentence's LLM thread."""
    import threading
    from types import SimpleNamespace

    from cosyvoice_mac.pipeline import streaming

    state = SimpleNamespace(producers=0, local=threading.local())

    class WatchedTurns(streaming.DeviceTurns):
        def _turn(self, chunk):
            inner = super()._turn(chunk)

            class Held:
                def __enter__(self_):
                    inner.__enter__()
                    state.local.in_turn = True

                def __exit__(self_, *exc):
                    state.local.in_turn = False
                    return inner.__exit__(*exc)

            return Held()

    class WatchedProducer(streaming.TokenProducer):
        def __init__(self, *args, **kwargs):
            state.producers += 1
            super().__init__(*args, **kwargs)

        def _run(self, tokens):
            with decoder:  # on the sentence's LLM thread (a dispatch mode is per thread)
                super()._run(tokens)

        def abandon(self):
            super().abandon()
            state.producers -= 1

    monkeypatch.setenv("COSYVOICE_SERIAL_DEVICE", "1")  # the MPS policy: turns on
    monkeypatch.setattr(streaming, "DeviceTurns", WatchedTurns)
    monkeypatch.setattr(streaming, "TokenProducer", WatchedProducer)
    model = CosyVoice.from_pretrained(make_tiny_model_dir(version, tmp_path / version), device="cpu")
    speaker = model.prepare_prompt(make_speech(PROMPT_TEXT, seconds=3.0), transcript=PROMPT_TEXT)
    consumer, decoder = TurnWatch(state), TurnWatch(state)
    with consumer:
        chunks = list(model.synthesize(TEXT, speaker=speaker, prompt_text=PROMPT_TEXT, seed=1, stream=True))
    assert len(chunks) >= 2 and state.producers == 0
    assert consumer.outside == set(), "the chunk thread ran ops outside its turn"  # before: the chunk ids' copies
    assert decoder.outside == set(), "the LLM thread ran ops outside its turn"
