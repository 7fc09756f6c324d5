"""What "MLX is what a Mac runs" built (issue 27), for CosyVoice2 too: its Qwen2 LLM decoding every streamed
sentence on the one long-lived decode thread taking turns with the chunks, the first streamed request with a
16-bit LLM, MLX's cache handed back after every sentence, a streamed chunk vocoded on its new frames only,
the quality gate's MLX rows holding for its LLM, and the doctor's MLX parity row covering its cases.

The CosyVoice3 forms of these tests are in tests/test_mlx_threads.py, test_mlx_memory.py, test_mlx_quantize.py.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

pytest.importorskip("mlx.core", reason="needs mlx (Linux: pip install 'mlx[cpu]')")

import mlx.core as mx  # noqa: E402
import torch  # noqa: E402

from cosyvoice_mac.mlx import memory  # noqa: E402
from cosyvoice_mac.mlx.hift import MlxHiFT  # noqa: E402
from cosyvoice_mac.mlx.speech_lm import MlxSpeechLM  # noqa: E402
from cosyvoice_mac.pipeline import CosyVoice  # noqa: E402
from cosyvoice_mac.pipeline.streaming import V2_MEL_CACHE_FRAMES  # noqa: E402
from cosyvoice_mac.request import Request, Voice  # noqa: E402
from tests.fakes.onnx_models import make_tiny_model_dir  # noqa: E402
from tests.test_mlx_threads import MlxWorkWatch  # noqa: E402


@pytest.fixture(scope="module")
def tiny_cosyvoice2(tmp_path_factory):
    return make_tiny_model_dir("cosyvoice2", tmp_path_factory.mktemp("tiny-v2") / "model")


@pytest.fixture(scope="module")
def prompt_wav(tmp_path_factory, make_speech):
    return str(make_speech("This is the voice I would like you to copy, please.", seconds=4.0))


@pytest.fixture
def mlx_model(tiny_cosyvoice2, monkeypatch, tmp_path):
    monkeypatch.setenv("COSYVOICE_MLX_CACHE", str(tmp_path / "mlx-cache"))
    monkeypatch.delenv("COSYVOICE_MLX_LLM", raising=False)
    memory_before, cache_before = mx.get_memory_limit(), mx.set_cache_limit(0)
    mx.set_cache_limit(cache_before)
    yield lambda: CosyVoice.from_pretrained(tiny_cosyvoice2, device="cpu", engine="mlx")
    mx.set_memory_limit(memory_before)
    mx.set_cache_limit(cache_before)


def test_the_first_streamed_cosyvoice2_request_with_a_16_bit_llm_works(mlx_model, prompt_wav, monkeypatch):
    monkeypatch.setenv("COSYVOICE_MLX_LLM", "fp16")
    model = mlx_model()
    assert model.networks.llm_precision == "fp16" and isinstance(model.networks.hift, MlxHiFT)
    assert not model.networks.hift.config.causal  # CosyVoice2's vocoder
    monkeypatch.setattr(MlxSpeechLM, "length_limits", lambda lm, text_length: (40, 40))  # a few chunks
    request = Request.build("Please read this sentence.", Voice.recording(prompt_wav, transcript="hello"), stream=True)
    chunks = list(model.run(request))  # no warm-up first: the 16-bit LLM meets its decode thread fresh
    assert chunks[-1].is_final_chunk and sum(c.audio.size for c in chunks) > 0


def test_two_hundred_streamed_cosyvoice2_sentences_decode_on_one_thread_taking_turns(
    mlx_model, prompt_wav, monkeypatch
):
    from cosyvoice_mac.mlx.convert import to_torch
    from cosyvoice_mac.mlx.speech_lm import SpeechDecoder

    model = mlx_model()
    watch = MlxWorkWatch()
    real_queue = SpeechDecoder._queue  # where each LLM step's MLX work is issued (CosyVoice2's Qwen2 too)
    monkeypatch.setattr(SpeechDecoder, "_queue", lambda self, h: watch.run(lambda: real_queue(self, h), llm=True))
    monkeypatch.setattr(MlxSpeechLM, "length_limits", lambda lm, text_length: (14, 14))  # a chunk, then the end
    lookahead = model.networks.flow.config.pre_lookahead_len

    def flow(ids, *prompt, finalize, **options):  # the chunks' MLX work, made cheap: a mel of the right size
        frames = 2 * (ids.shape[1] - (0 if finalize else lookahead))
        return watch.run(lambda: to_torch(mx.zeros((1, 80, frames)) + mx.array(0.0)), llm=False)

    def vocoder(mel, *, cache_source=None, noise=None, **options):  # CosyVoice2's cross-fade call: wave and source
        samples = 480 * mel.shape[2]
        made = lambda: (to_torch(mx.zeros((1, samples)) + 0.0), to_torch(mx.zeros((1, 1, samples)) + 0.0))  # noqa: E731
        return watch.run(made, llm=False)

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
    assert len(watch.llm_streams) == 1  # one MLX stream (a Metal command queue) for all 200
    assert watch.llm_threads == {model.decode_thread.ident}
    assert watch.overlaps == 0  # the LLM and the chunks took turns


def test_cosyvoice2_hands_the_cache_back_and_vocodes_only_new_frames_when_streaming(mlx_model, prompt_wav, monkeypatch):
    """Two streamed sentences of several chunks each: MLX's cache is cleared after each sentence, and each
    chunk's vocoder call decodes its new mel frames plus the cross-fade's 8 frames of context, never the
    sentence's mel from frame 0 again."""
    model = mlx_model()
    speaker = model.prepare_prompt(prompt_wav, transcript="hello")
    model.normalizer.token_max_n, model.normalizer.token_min_n, model.normalizer.merge_len = 8, 4, 2  # 2 segments
    monkeypatch.setattr(MlxSpeechLM, "length_limits", lambda lm, text_length: (60, 60))
    decoded: list[int] = []
    real_decode = MlxHiFT.decode

    def counting(self, mel, source, **options):
        decoded.append(mel.shape[1])
        return real_decode(self, mel, source, **options)

    monkeypatch.setattr(MlxHiFT, "decode", counting)
    cleared: list[int] = []
    real_clear = memory.mx.clear_cache
    monkeypatch.setattr(memory.mx, "clear_cache", lambda: (cleared.append(len(decoded)), real_clear())[1])
    request = Request.build(
        "The first sentence is here. And this is the second one.", Voice.recording(prompt_wav), stream=True
    )
    results = list(model.run(request, speaker=speaker))
    assert {result.segment_index for result in results} == {0, 1} and len(cleared) == 2
    assert mx.get_cache_memory() == 0 and all(torch.isfinite(torch.as_tensor(r.audio)).all() for r in results)
    per_sentence = len(decoded) // 2
    assert per_sentence >= 3  # several chunks per sentence
    for sentence in (decoded[:per_sentence], decoded[per_sentence:]):
        first, *later = sentence
        assert sum(sentence) == 2 * 60 + V2_MEL_CACHE_FRAMES * len(later)  # each frame once, plus the context
        assert all(frames < sum(sentence) - V2_MEL_CACHE_FRAMES for frames in later)


@pytest.mark.parametrize("choice", ["fp16", "bf16", "int8", "int4"])
def test_the_mlx_gate_rows_hold_for_cosyvoice2s_llm(choice):
    """The gate's MLX rows (one table for both versions' LLMs) re-measured on CosyVoice2's: 16-bit rows on its
    golden vectors, quantized rows on a 128-wide CosyVoice2 LLM (the golden one is 8 wide: MLX cannot group it)."""
    from safetensors.torch import load_file

    from cosyvoice_mac.config import read_yaml_config
    from cosyvoice_mac.mlx.networks import apply_llm_precision
    from cosyvoice_mac.mlx.quality import top_k_agreement
    from cosyvoice_mac.mlx.speech_lm import load_mlx_speech_lm
    from cosyvoice_mac.models.llm import Qwen2Config, SpeechLMConfig
    from cosyvoice_mac.pipeline import gate
    from cosyvoice_mac.versions import COSYVOICE2
    from tests.parity.common import parity_dir
    from tests.test_mlx_quantize import SMALL_QWEN, SPEECH_TOKENS, request

    row = gate.mlx_llm_row(choice)
    if choice.startswith("int"):
        from cosyvoice_mac.mlx.networks import randomize

        def small() -> MlxSpeechLM:
            config = SpeechLMConfig(spec=COSYVOICE2, speech_token_size=SPEECH_TOKENS, qwen=Qwen2Config(**SMALL_QWEN))
            llm = MlxSpeechLM(config)
            randomize(llm, 0)
            return llm

        forced = lambda llm: llm.teacher_forced_logits(llm.build_prompt_embeddings(*request()))[0]  # noqa: E731
        measured = top_k_agreement(forced(small()), forced(apply_llm_precision(small(), choice)))["mean"]
    else:
        root = parity_dir() / "cosyvoice2_tiny"
        node = read_yaml_config(root / "cosyvoice2.yaml", overrides={"qwen_pretrain_path": ""})["llm"]
        llm = apply_llm_precision(load_mlx_speech_lm(root, node), choice)
        vectors = load_file(str(root / "vectors" / "llm.safetensors"))
        ours = llm.teacher_forced_logits(vectors["lm_input_embeds"])[0]
        measured = top_k_agreement(vectors["logits_teacher_forced"][0], ours)["mean"]
    if row.passes:
        assert measured >= gate.MIN_TOP_K_AGREEMENT, (choice, measured)
    elif choice == "int4":  # far outside the gate
        assert measured < gate.MIN_TOP_K_AGREEMENT, (choice, measured)


@pytest.mark.parametrize("held", ["as configured", "one version"])
def test_the_doctors_mlx_parity_row_runs_the_cases_of_every_version_the_manifest_holds(held, tmp_path):
    """``bench.doctor.mlx_parity`` runs tests/test_parity_mlx.py on the parity folder it is given: its cases are
    those of the versions that folder's manifest holds (one or both), each version with every stage."""
    import os

    from cosyvoice_mac.bench import doctor
    from tests.parity.common import one_version_copy, parity_dir, versions_in_manifest

    folder = parity_dir()
    if held == "one version":
        folder = one_version_copy(folder, versions_in_manifest(folder)[-1], tmp_path / "parity")
    held_versions = versions_in_manifest(folder)
    assert held_versions and (held != "one version" or len(held_versions) == 1), held_versions
    tests = doctor.REPO / "tests" / "test_parity_mlx.py"
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", str(tests)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=doctor.REPO,
        env={**os.environ, "COSYVOICE_PARITY_DIR": str(folder)},
    ).stdout.splitlines()
    cases = [line for line in listed if "::test_parity_mlx[" in line]
    stages = {"flow", "hift", "llm", "e2e"}
    for version in held_versions:
        of_version = [line for line in cases if f"[{version}-mlx-" in line]
        assert len(of_version) >= 10 and all(any(stage in line for line in of_version) for stage in stages), cases
    assert all(any(f"[{version}-mlx-" in line for version in held_versions) for line in cases), cases
