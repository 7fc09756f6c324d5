"""Model folders in the official layout with seeded random weights at any size, up to the released one.

``write_random_weight_folder("cosyvoice3", dest)`` writes what a downloaded Fun-CosyVoice3 folder holds
for inference, at the released shapes: the yaml (the tiny parity yaml with every value its ``# official``
comment names), ``CosyVoice-BlankEN/`` (the tiny tokenizer, the Qwen2-0.5B config), ``llm.pt``,
``flow.pt`` and ``hift.pt`` as the official files store them (float32, one storage per tensor, the
text head tied to the text table, HiFT's convolutions weight-normed), and both ONNX files as stand-ins
of the real files' sizes whose every call reads all of their weights (as the real graphs do). The
weights are random: the speech is noise, the memory and the compute are the real model's.
Smaller variants (``yaml_values``, ``qwen``) prove the loading mechanisms in tests.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from cosyvoice_mac.config import read_yaml_config
from cosyvoice_mac.models.llm import Qwen2Config
from cosyvoice_mac.pipeline.fullsize import QWEN2_0_5B
from cosyvoice_mac.pipeline.loading import build_networks
from cosyvoice_mac.pipeline.model_dir import BLANK_EN, SPEECH_TOKENIZER_FILES
from tests.fakes.onnx_models import write_fake_campplus, write_fake_speech_tokenizer
from tests.parity.common import parity_dir

# Bytes of the released files (spec section 1.2); the ONNX stand-ins are grown to these.
RELEASED_ONNX_BYTES = {
    "speech_tokenizer_v3.onnx": 969_451_503,
    "speech_tokenizer_v2.onnx": 496_082_973,
    "campplus.onnx": 28_303_423,
}
OFFICIAL = re.compile(r"^(?P<key>\s*[\w]+:\s*)(?P<value>[^#\s]+)(?P<gap>\s*)#\s*official\s+(?P<official>\S+)\s*$")
TIED_TEXT_HEAD = ("llm.model.lm_head.weight", "llm.model.model.embed_tokens.weight")
WEIGHT_NORM = ".parametrizations.weight.original"
BALLAST_ROWS, BALLAST_COLUMNS = 1024, 4096  # one stand-in weight matrix: 16 MiB of float32


def yaml_text(version: str, values: dict[str, int] | None = None) -> str:
    """The tiny parity yaml of ``version`` with ``values`` (top-level key -> value) put in, or, with None,
    every value replaced by the one its ``# official N`` comment names (the released yaml's shapes)."""
    lines = []
    for line in (parity_dir() / f"{version}_tiny" / f"{version}.yaml").read_text().splitlines():
        match = OFFICIAL.match(line)
        if values is None and match:
            line = f"{match['key']}{match['official']}"
        elif values:
            key = line.split(":", 1)[0]
            if key in values:
                line = f"{key}: {values[key]}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def write_random_weight_folder(
    version: str,
    dest: Path,
    *,
    yaml_values: dict[str, int] | None = None,
    qwen: dict | None = None,
    onnx_bytes: dict[str, int] | None = None,
    seed: int = 0,
) -> Path:
    """Write a complete model folder at ``dest``: released shapes by default (see the module docstring).

    ``yaml_values`` / ``qwen`` (Qwen2 config fields) give a smaller variant; ``onnx_bytes`` (file name ->
    bytes) sizes the ONNX stand-ins (default: the released sizes at released shapes, tiny otherwise).
    """
    dest = Path(dest)
    tiny = parity_dir() / f"{version}_tiny"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / f"{version}.yaml").write_text(yaml_text(version, yaml_values))
    shutil.copytree(tiny / BLANK_EN, dest / BLANK_EN, dirs_exist_ok=True)
    qwen_json = json.loads((tiny / BLANK_EN / "config.json").read_text())
    qwen_json.update(qwen if qwen is not None else {key: value for key, value in QWEN2_0_5B.items()})
    (dest / BLANK_EN / "config.json").write_text(json.dumps(qwen_json, indent=2))
    config = read_yaml_config(dest / f"{version}.yaml")
    networks = build_networks(
        config,
        Qwen2Config.from_json(dest / BLANK_EN / "config.json"),
        folder=None,
        device=torch.device("cpu"),
        random_weights=True,
        seed=seed,
    )
    _save_official(networks.llm.state_dict(), dest / "llm.pt", tie=TIED_TEXT_HEAD)
    _save_official(networks.flow.state_dict(), dest / "flow.pt")
    tiny_hift = torch.load(tiny / "hift.pt", weights_only=True, mmap=True)
    weight_normed = {key.split(WEIGHT_NORM)[0] for key in tiny_hift if WEIGHT_NORM in key}
    _save_official(_weight_normed(networks.hift.state_dict(), weight_normed), dest / "hift.pt")
    del networks
    released_shapes = yaml_values is None and qwen is None
    sizes = onnx_bytes if onnx_bytes is not None else RELEASED_ONNX_BYTES if released_shapes else {}
    tokenizer = dest / SPEECH_TOKENIZER_FILES[version]
    write_fake_speech_tokenizer(tokenizer, vocab_size=int(config["llm"]["speech_token_size"]))
    write_fake_campplus(dest / "campplus.onnx")
    for path in (tokenizer, dest / "campplus.onnx"):
        if path.name in sizes:
            add_ballast(path, sizes[path.name])
    return dest


def _save_official(state: dict[str, torch.Tensor], path: Path, tie: tuple[str, str] | None = None) -> None:
    """Save as the official files are: each tensor its own storage (our fused weights hand out row views)."""
    official = {
        key: tensor.clone() if tensor.untyped_storage().nbytes() != tensor.nbytes else tensor
        for key, tensor in state.items()
    }
    if tie is not None:
        official[tie[0]] = official[tie[1]]  # the same tensor: stored once, as in the released llm.pt
    torch.save(official, path)


def _weight_normed(state: dict[str, torch.Tensor], prefixes: set[str]) -> dict[str, torch.Tensor]:
    """``W`` as the magnitude/direction pair weight norm stores (folded back to ``W`` at load)."""
    out = {}
    for key, tensor in state.items():
        prefix = key.removesuffix(".weight")
        if key.endswith(".weight") and prefix in prefixes:
            out[f"{prefix}{WEIGHT_NORM}0"] = tensor.norm(dim=tuple(range(1, tensor.dim())), keepdim=True)
            out[f"{prefix}{WEIGHT_NORM}1"] = tensor
        else:
            out[key] = tensor
    return out


def add_ballast(path: Path, total_bytes: int) -> Path:
    """Grow an ONNX model to about ``total_bytes`` with weight matrices that every run multiplies by.

    Like a real network's: ``(1024, 4096)`` float32 matrices (the last one narrower), each the constant
    right-hand side of a MatMul (so onnxruntime pre-packs them as it does real weights), multiplied by a
    vector computed from the run's own output (zero, but not known before the run, so no optimiser folds
    it away). Every call reads all of them, so memory measurements see what a real graph costs.
    """
    model = onnx.load(str(path))
    graph = model.graph
    output = graph.output[0]
    raw = f"{output.name}_before_ballast"
    for node in graph.node:
        node.output[:] = [raw if name == output.name else name for name in node.output]
    rng = np.random.default_rng(0)
    remaining = max(4 * BALLAST_ROWS, total_bytes - path.stat().st_size) // (4 * BALLAST_ROWS)  # columns left
    widths = [BALLAST_COLUMNS] * (remaining // BALLAST_COLUMNS) + (
        [remaining % BALLAST_COLUMNS] * bool(remaining % BALLAST_COLUMNS)
    )
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array([1, BALLAST_ROWS], dtype=np.int64), "ballast_vector_shape"),
            numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
        ]
    )
    nodes = [
        helper.make_node("Cast", [raw], ["ballast_float"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["ballast_float"], ["ballast_total"], keepdims=0),
        helper.make_node("Mul", ["ballast_total", "zero"], ["ballast_zero"]),
        helper.make_node("Expand", ["ballast_zero", "ballast_vector_shape"], ["ballast_vector"]),
    ]
    for index, width in enumerate(widths):
        weight = rng.standard_normal((BALLAST_ROWS, width), dtype=np.float32)
        graph.initializer.append(numpy_helper.from_array(weight, f"ballast_{index}"))
        nodes += [
            helper.make_node("MatMul", ["ballast_vector", f"ballast_{index}"], [f"ballast_product_{index}"]),
            helper.make_node("ReduceSum", [f"ballast_product_{index}"], [f"ballast_sum_{index}"], keepdims=0),
        ]
    nodes += [
        helper.make_node("Sum", [f"ballast_sum_{index}" for index in range(len(widths))], ["ballast_sum"]),
        helper.make_node("Cast", ["ballast_sum"], ["ballast_cast"], to=output.type.tensor_type.elem_type),
        helper.make_node("Add", [raw, "ballast_cast"], [output.name]),
    ]
    graph.node.extend(nodes)
    onnx.save(model, str(path))
    return path
