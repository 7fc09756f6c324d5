"""Tiny ONNX files with the official input/output signatures, and complete tiny model folders.

The graphs are real (pooling, matmul, argmax) so wrappers are exercised through onnxruntime
exactly as with the official files; the weights are seeded random, so the outputs mean nothing.

* speech tokenizer: inputs ``[0]`` float32 ``(1, 128, T)``, ``[1]`` int32 ``(1,)`` (= T) ->
  int32 tokens ``(1, T // 4)`` in ``[0, vocab_size)``; the length input really trims the output.
* CAM++: input float32 ``(1, T, 80)`` -> float32 ``(1, 192)``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cosyvoice_mac.config import read_yaml_config
from tests.parity.common import parity_dir

OPSET = 17
IR_VERSION = 8  # readable by every onnxruntime >= 1.10
VERSIONS = ("cosyvoice2", "cosyvoice3")


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tests.fakes")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def write_fake_speech_tokenizer(
    path: Path,
    vocab_size: int = 6561,
    seed: int = 0,
    input_names: tuple[str, str] = ("feats", "feats_length"),
) -> Path:
    """Write a speech-tokenizer-shaped ONNX model: 4-frame average pool, projection, argmax."""
    mel_name, length_name = input_names
    projection = np.random.default_rng(seed).standard_normal((128, vocab_size)).astype(np.float32)
    initializers = [
        numpy_helper.from_array(projection, "projection"),
        numpy_helper.from_array(np.array([4], dtype=np.int32), "frames_per_token"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "slice_start"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "time_axis"),
    ]
    nodes = [
        helper.make_node("AveragePool", [mel_name], ["pooled"], kernel_shape=[4], strides=[4]),
        helper.make_node("Div", [length_name, "frames_per_token"], ["token_count32"]),
        helper.make_node("Cast", ["token_count32"], ["token_count"], to=TensorProto.INT64),
        helper.make_node("Slice", ["pooled", "slice_start", "token_count", "time_axis"], ["valid"]),
        helper.make_node("Transpose", ["valid"], ["frames"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["frames", "projection"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["codes"], axis=2, keepdims=0),
        helper.make_node("Cast", ["codes"], ["indices"], to=TensorProto.INT32),
    ]
    graph = helper.make_graph(
        nodes,
        "fake_speech_tokenizer",
        inputs=[
            helper.make_tensor_value_info(mel_name, TensorProto.FLOAT, [1, 128, "T"]),
            helper.make_tensor_value_info(length_name, TensorProto.INT32, [1]),
        ],
        outputs=[helper.make_tensor_value_info("indices", TensorProto.INT32, [1, "T_tok"])],
        initializer=initializers,
    )
    return _save(graph, Path(path))


def write_fake_campplus(path: Path, seed: int = 0, input_name: str = "input") -> Path:
    """Write a CAM++-shaped ONNX model: per-bin max and RMS over time, projection, tanh."""
    rng = np.random.default_rng(seed)
    # fbank summaries are ~10 in size: keep tanh out of saturation so outputs follow the audio.
    weight = (0.1 * rng.standard_normal((160, 192)) / np.sqrt(160)).astype(np.float32)
    bias = (0.1 * rng.standard_normal(192)).astype(np.float32)
    nodes = [
        helper.make_node("ReduceMax", [input_name], ["peak"], axes=[1], keepdims=0),
        helper.make_node("Mul", [input_name, input_name], ["squared"]),
        helper.make_node("ReduceMean", ["squared"], ["mean_square"], axes=[1], keepdims=0),
        helper.make_node("Sqrt", ["mean_square"], ["rms"]),
        helper.make_node("Concat", ["peak", "rms"], ["summary"], axis=1),
        helper.make_node("MatMul", ["summary", "weight"], ["projected"]),
        helper.make_node("Add", ["projected", "bias"], ["pre_activation"]),
        helper.make_node("Tanh", ["pre_activation"], ["embedding"]),
    ]
    graph = helper.make_graph(
        nodes,
        "fake_campplus",
        inputs=[helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [1, "T", 80])],
        outputs=[helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [1, 192])],
        initializer=[numpy_helper.from_array(weight, "weight"), numpy_helper.from_array(bias, "bias")],
    )
    return _save(graph, Path(path))


def make_tiny_model_dir(version: str, dest: Path) -> Path:
    """A complete tiny model folder in the official layout at ``dest`` (created if needed).

    Copies ``<parity>/<version>_tiny/{<version>.yaml, *.pt, CosyVoice-BlankEN/}`` and writes fake
    ``campplus.onnx`` and ``speech_tokenizer_v{2,3}.onnx`` whose codes fit the yaml's
    ``llm.speech_token_size``.
    """
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}, got {version!r}")
    source = parity_dir() / f"{version}_tiny"
    if not source.is_dir():
        raise FileNotFoundError(f"no tiny model folder {source}; set COSYVOICE_PARITY_DIR")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    yaml_path = source / f"{version}.yaml"
    for file in [yaml_path, *sorted(source.glob("*.pt"))]:
        shutil.copy2(file, dest / file.name)
    shutil.copytree(source / "CosyVoice-BlankEN", dest / "CosyVoice-BlankEN", dirs_exist_ok=True)
    vocab_size = int(read_yaml_config(yaml_path)["llm"]["speech_token_size"])
    write_fake_campplus(dest / "campplus.onnx")
    write_fake_speech_tokenizer(dest / f"speech_tokenizer_v{version[-1]}.onnx", vocab_size=vocab_size)
    return dest
