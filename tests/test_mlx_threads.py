"""MLX and threads: since mlx 0.31.2 an MLX stream belongs to the thread that made it, so whatever one thread
builds lazily (a cast, a quantisation) another thread cannot evaluate. Every array the engine keeps must be
evaluated where it is made; streaming decodes on one long-lived thread, and takes turns with the chunks.
"""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("mlx.core", reason="needs mlx (Linux: pip install 'mlx[cpu]')")

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

from cosyvoice_mac.mlx.networks import apply_llm_precision  # noqa: E402
from cosyvoice_mac.pipeline import CosyVoice  # noqa: E402
from cosyvoice_mac.request import Request, Voice  # noqa: E402
from tests.fakes.onnx_models import make_tiny_model_dir  # noqa: E402
from tests.test_mlx_quantize import parameter_bytes, small_llm, teacher_forced  # noqa: E402


def in_new_thread(work):
    """Run ``work()`` on a fresh thread (a fresh MLX stream); return its result or raise its error."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = work()
        except BaseException as error:  # noqa: BLE001 - handed back to the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=120)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.mark.parametrize("precision", ["fp16", "bf16", "int8"])
def test_a_reduced_precision_llm_runs_on_another_thread(precision):
    llm = apply_llm_precision(small_llm(), precision)
    logits = in_new_thread(lambda: teacher_forced(llm))  # before: "There is no Stream(cpu, 0) in current thread"
    assert np.isfinite(logits.numpy()).all()


def test_16_bit_cast_frees_the_fp32_weights_as_it_goes():
    llm = small_llm(vocab_size=4096)  # a text table no bigger than a layer: the peak shows how the cast goes
    fp32 = parameter_bytes(llm)
    largest = max(a.nbytes for _, a in tree_flatten(llm.parameters()))
    mx.clear_cache()
    before = mx.get_active_memory()
    mx.reset_peak_memory()
    apply_llm_precision(llm, "fp16")
    assert all(a.dtype == mx.float16 for _, a in tree_flatten(llm.parameters()))
    assert mx.get_active_memory() - before < -0.45 * fp32  # the fp32 copy is gone, not waiting for a forward pass
    assert mx.get_peak_memory() - before <= largest // 2 + 4096  # one parameter at a time, never both whole copies


@pytest.fixture(scope="module")
def tiny_cosyvoice3(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-v3")
    return make_tiny_model_dir("cosyvoice3", folder / "model")


@pytest.fixture(scope="module")
def prompt_wav(tmp_path_factory, make_speech):
    return str(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))


@pytest.mark.parametrize(
    ("precision", "cache", "read_in_fp32"),
    [
        ("fp16", None, False),  # read in fp16 from llm.pt or the cache: nothing left to cast
        ("int8", "off", False),  # the head and tables widened to fp32 after quantising, no cache write to evaluate them
        ("fp16", "off", True),  # weights that arrive in fp32 (as random benchmark weights do), cast to fp16 at load
    ],
    ids=["fp16", "int8-uncached", "fp16-cast-at-load"],
)
def test_the_first_streamed_request_with_a_reduced_precision_llm_works(
    tiny_cosyvoice3, prompt_wav, monkeypatch, precision, cache, read_in_fp32
):
    """Every cast made while loading is evaluated on the loading thread: the decode thread, a fresh MLX stream,
    cannot evaluate another thread's lazy cast ("There is no Stream(cpu, 0) in current thread")."""
    from cosyvoice_mac.mlx import llm_weights

    monkeypatch.setenv("COSYVOICE_MLX_LLM", precision)
    if cache is not None:
        monkeypatch.setenv("COSYVOICE_MLX_CACHE", cache)
    if read_in_fp32:
        monkeypatch.setattr(llm_weights, "read_dtype", lambda name: None)
    model = CosyVoice.from_pretrained(tiny_cosyvoice3, device="cpu", engine="mlx")
    assert model.networks.llm_precision == precision
    weights = [array for _, array in tree_flatten(model.networks.llm.parameters())]
    in_new_thread(lambda: mx.eval(weights))  # each weight is there already, readable from any thread
    request = Request.build("Please read this sentence.", Voice.recording(prompt_wav, transcript="hello"), stream=True)
    chunks = list(model.run(request))  # no non-streamed warm-up first: the LLM meets its decode thread fresh
    assert chunks[-1].is_final_chunk and sum(c.audio.size for c in chunks) > 0


class MlxWorkWatch:
    """Counts the threads, MLX streams and overlaps of the MLX work it wraps (LLM steps and chunks)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.in_flight = 0
        self.overlaps = 0
        self.llm_threads: set[int] = set()
        self.llm_streams: set[str] = set()

    def run(self, work, *, llm: bool):
        with self.lock:
            self.in_flight += 1
            self.overlaps += self.in_flight > 1
            if llm:
                self.llm_threads.add(threading.get_ident())
                self.llm_streams.add(str(mx.default_stream(mx.default_device())))
        try:
            return work()
        finally:
            with self.lock:
                self.in_flight -= 1


def test_two_hundred_streamed_sentences_decode_on_one_thread_and_stream_taking_turns(
    tiny_cosyvoice3, prompt_wav, monkeypatch
):
    from cosyvoice_mac.mlx.convert import to_torch
    from cosyvoice_mac.mlx.speech_lm import MlxSpeechLM, SpeechDecoder

    monkeypatch.delenv("COSYVOICE_MLX_LLM", raising=False)
    model = CosyVoice.from_pretrained(tiny_cosyvoice3, device="cpu", engine="mlx")
    watch = MlxWorkWatch()
    real_queue = SpeechDecoder._queue  # where each LLM step's MLX work is issued
    monkeypatch.setattr(SpeechDecoder, "_queue", lambda self, h: watch.run(lambda: real_queue(self, h), llm=True))
    monkeypatch.setattr(MlxSpeechLM, "length_limits", lambda lm, text_length: (14, 14))  # a chunk, then the end
    # The chunks' MLX work, made cheap (the real flow and vocoder take seconds here): mel and wave of the right size.
    lookahead = model.networks.flow.config.pre_lookahead_len

    def flow(ids, *prompt, finalize, **options):
        frames = 2 * (ids.shape[1] - (0 if finalize else lookahead))
        return watch.run(lambda: to_torch(mx.zeros((1, 80, frames)) + mx.array(0.0)), llm=False)

    def vocoder(mel, *, finalize, noise=None, first_frame=0):
        samples = 480 * (mel.shape[2] - first_frame)
        return watch.run(lambda: (to_torch(mx.zeros((1, samples)) + 0.0), None), llm=False)

    model.networks.flow.inference = flow
    model.networks.hift.inference = vocoder
    speaker = model.prepare_prompt(prompt_wav, transcript="hello")
    threads_before = threading.active_count()
    request = Request.build("Hi there.", Voice.recording(prompt_wav, transcript="hello"), stream=True, seed=1)
    finals = 0
    for _ in range(200):
        finals += sum(chunk.is_final_chunk for chunk in model.run(request, speaker=speaker))
    assert finals == 200
    assert threading.active_count() <= threads_before + 1  # the one decode thread, started with the first sentence
    assert len(watch.llm_streams) == 1  # one MLX stream (a Metal command queue) for all 200, not 200
    assert watch.llm_threads == {model.decode_thread.ident}  # before: a new llm-producer thread per sentence
    assert watch.overlaps == 0  # the LLM and the chunks took turns: never two threads' MLX work at once


def test_the_queued_decoding_loop_gives_the_shared_loops_tokens(tiny_cosyvoice3):
    """MLX's loop queues each step before handing the token on; the tokens are the PyTorch loop's, seed for seed."""
    import torch

    from cosyvoice_mac.models.llm import SpeechLM
    from cosyvoice_mac.models.llm.speech_lm import ENDOFPROMPT_ID

    model = CosyVoice.from_pretrained(tiny_cosyvoice3, device="cpu", engine="mlx")
    llm = model.networks.llm
    generator = torch.Generator().manual_seed(3)
    text = torch.randint(0, 1000, (1, 12), generator=generator)
    prompt_text = torch.cat([torch.randint(0, 1000, (1, 6), generator=generator), torch.tensor([[ENDOFPROMPT_ID]])], 1)
    speech = torch.randint(0, llm.config.speech_token_size, (1, 30), generator=generator)
    embeds = llm.build_prompt_embeddings(text, prompt_text, speech)
    for seed in (1, 2, 3):
        queued = list(llm._decode(embeds, 5, 60, llm.make_sampler(seed=seed), None))
        shared = list(SpeechLM._decode_on_host(llm, embeds, 5, 60, llm.make_sampler(seed=seed), None))
        assert queued == shared and len(queued) >= 5
