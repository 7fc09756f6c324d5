"""Read an official CosyVoice YAML (HyperPyYAML) file as plain data, never as code.

Upstream configs use tags such as ``!new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT`` that
instantiate Python objects when loaded with HyperPyYAML; a model folder would then be able to
run arbitrary code. Here every tagged node becomes a plain ``dict`` whose ``"_tag"`` entry holds
the tag (``"new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT"``); sequences under a tag become
``{"_tag": ..., "args": [...]}``. ``!ref <name>`` references are resolved against the document,
including the small arithmetic upstream uses (``!ref <chunk_size> * <token_mel_ratio>``).
"""

from __future__ import annotations

import ast
import operator
import re
from pathlib import Path
from typing import Any

import yaml

from cosyvoice_mac.errors import CosyVoiceError


class ConfigError(CosyVoiceError, ValueError):
    """A model config file that cannot be read or lacks a value we need."""


class _Ref:
    def __init__(self, expr: str):
        self.expr = expr


class _SafeTagLoader(yaml.SafeLoader):
    """SafeLoader that keeps every ``!tag`` as data instead of rejecting or executing it."""


def _construct_tagged(loader: _SafeTagLoader, tag_suffix: str, node: yaml.Node) -> Any:
    if tag_suffix == "ref":
        return _Ref(loader.construct_scalar(node))
    if isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
        return {"_tag": tag_suffix, **value}
    if isinstance(node, yaml.SequenceNode):
        return {"_tag": tag_suffix, "args": loader.construct_sequence(node, deep=True)}
    scalar = loader.construct_scalar(node)
    return {"_tag": tag_suffix, "args": [] if scalar in ("", None) else [scalar]}


_SafeTagLoader.add_multi_constructor("!", _construct_tagged)

_REF_NAME = re.compile(r"<([^<>]+)>")
_BINARY_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
}


def _lookup(root: dict, dotted: str) -> Any:
    node: Any = root
    for part in re.split(r"[.\[\]]+", dotted.strip()):
        if not part:
            continue
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise ConfigError(f"!ref <{dotted}> names a key that the config does not have")
    return node


def _evaluate_arithmetic(expr: str) -> Any:
    """Evaluate ``3 * 25``-style expressions without eval(): numbers and + - * / // only."""

    def walk(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
            return _BINARY_OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ConfigError(f"unsupported expression in !ref: {expr!r}")

    return walk(ast.parse(expr, mode="eval"))


def _resolve(node: Any, root: dict, depth: int = 0) -> Any:
    if depth > 50:
        raise ConfigError("!ref references form a cycle")
    if isinstance(node, _Ref):
        names = _REF_NAME.findall(node.expr)
        if len(names) == 1 and node.expr.strip() == f"<{names[0]}>":
            return _resolve(_lookup(root, names[0]), root, depth + 1)
        values = {name: _resolve(_lookup(root, name), root, depth + 1) for name in names}
        substituted = _REF_NAME.sub(lambda m: repr(values[m.group(1)]), node.expr)
        return _evaluate_arithmetic(substituted)
    if isinstance(node, dict):
        return {key: _resolve(value, root, depth) for key, value in node.items()}
    if isinstance(node, list):
        return [_resolve(value, root, depth) for value in node]
    return node


def read_yaml_config(path: str | Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Parse an official ``cosyvoice{2,3}.yaml`` into nested plain dicts.

    ``overrides`` replace top-level keys before references are resolved (upstream passes
    ``qwen_pretrain_path`` this way).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read config {path}: {error}") from error
    try:
        document = yaml.load(text, Loader=_SafeTagLoader)  # noqa: S506 - loader never builds objects
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {error}") from error
    if not isinstance(document, dict):
        raise ConfigError(f"{path} does not hold a YAML mapping")
    document.update(overrides or {})
    return _resolve(document, document)


def tag_name(node: dict) -> str:
    """The class or function a tagged node names, e.g. ``'CausalHiFTGenerator'``."""
    return str(node.get("_tag", "")).rsplit(".", 1)[-1]


def require(node: dict, key: str, where: str) -> Any:
    if key not in node:
        raise ConfigError(f"config section {where!r} lacks {key!r}")
    return node[key]
