"""A small numpy interpreter of Core ML ML Programs, for checking saved ``.mlpackage`` numerics on Linux.

Core ML itself runs only on macOS (``MLModel.predict`` raises elsewhere), so tests reload a saved
package through coremltools' MIL proto loader (which re-runs type and shape inference on every op)
and execute the program here, op by op, in numpy. Each op computes in float32 (or int32 / bool) and
its result is cast to the dtype the program declares, so an fp16 package shows its fp16 *storage*
error. That is a model of precision, not of Apple's kernels (their accumulation order, fused ops or
fp16 accumulators are not modelled): the real numbers come from the ``mac`` tests.

Only the op types that the vocoder graphs use are implemented; anything else raises
:class:`UnsupportedOp` naming the op, so a new op in a converted graph cannot pass unnoticed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import as_strided


class UnsupportedOp(NotImplementedError):
    """The program uses an op type (or an op option) this interpreter does not implement."""


def load_program(package: str | Path, function: str = "main"):
    """(MIL Program, its function) of a saved ``.mlpackage``, via coremltools' milproto loader."""
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto.load import load as milproto_load

    package = Path(package)
    spec = ct.models.MLModel(str(package), skip_model_load=True).get_spec()
    weights = package / "Data" / "com.apple.CoreML" / "weights"
    program = milproto_load(spec, spec.specificationVersion, file_weights_dir=str(weights))
    return program, program.functions[function]


def _nptype(var):
    from coremltools.converters.mil.mil import types

    dtype = var.dtype
    if types.is_tensor(dtype):
        dtype = dtype.get_primitive()
    return types.nptype_from_builtin(dtype)


class MILInterpreter:
    """Runs one function of a saved ML Program: ``predict({name: array}) -> {name: array}``."""

    def __init__(self, package: str | Path, function: str = "main"):
        self.program, self.function = load_program(package, function)
        self.input_names = list(self.function.inputs)
        self.output_names = [var.name for var in self.function.outputs]
        self.op_types = [op.op_type for op in self.function.operations]

    def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        env: dict[str, np.ndarray] = {}
        for name, var in self.function.inputs.items():
            if name not in inputs:
                raise KeyError(f"missing input {name!r}")
            env[name] = np.asarray(inputs[name]).astype(_nptype(var))
        for op in self.function.operations:
            handler = _OPS.get(op.op_type)
            if handler is None:
                raise UnsupportedOp(f"op {op.op_type} ({op.name}) is not implemented by the test interpreter")
            args = {key: self._value(value, env) for key, value in op.inputs.items()}
            result = handler(op, **args)
            outputs = result if isinstance(result, tuple) else (result,)
            for var, value in zip(op.outputs, outputs):
                env[var.name] = np.asarray(value).astype(_nptype(var))
        return {name: env[name] for name in self.output_names}

    @staticmethod
    def _value(value, env):
        if isinstance(value, (list, tuple)):
            return [MILInterpreter._value(item, env) for item in value]
        if value.name in env:
            return env[value.name]
        if value.val is not None:
            return np.asarray(value.val)
        raise KeyError(f"value {value.name} is used before it is computed")


def _f32(x):
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _scalar(x):
    return np.asarray(x).reshape(-1)[0].item() if np.asarray(x).size == 1 else x


def _conv(op, x, weight, bias=None, strides=None, pad_type=None, pad=None, dilations=None, groups=None):
    x, weight = _f32(x), _f32(weight)
    if x.ndim != 3:
        raise UnsupportedOp(f"conv {op.name}: only 1-D convolution is implemented")
    if groups is not None and int(_scalar(groups)) != 1:
        raise UnsupportedOp(f"conv {op.name}: groups != 1")
    stride = int(np.asarray(strides).reshape(-1)[0]) if strides is not None else 1
    dilation = int(np.asarray(dilations).reshape(-1)[0]) if dilations is not None else 1
    kernel = weight.shape[-1]
    span = dilation * (kernel - 1) + 1
    left, right = _conv_padding(op, str(pad_type) if pad_type is not None else "valid", pad, x.shape[-1], span, stride)
    x = np.pad(x, ((0, 0), (0, 0), (left, right)))
    batch, channels, length = x.shape
    out_length = (length - span) // stride + 1
    s_b, s_c, s_l = x.strides
    windows = as_strided(x, (batch, out_length, channels, kernel), (s_b, s_l * stride, s_c, s_l * dilation))
    columns = windows.reshape(batch, out_length, channels * kernel)
    out = columns @ weight.reshape(weight.shape[0], -1).T  # (B, L_out, C_out)
    if bias is not None:
        out = out + _f32(bias)
    return np.ascontiguousarray(out.transpose(0, 2, 1))


def _conv_padding(op, pad_type, pad, length, span, stride):
    if pad_type == "custom":
        left, right = (int(v) for v in np.asarray(pad).reshape(-1)[:2])
        return left, right
    if pad_type == "valid":
        return 0, 0
    if pad_type == "same":
        total = max((-(-length // stride) - 1) * stride + span - length, 0)
        return total // 2, total - total // 2
    raise UnsupportedOp(f"conv {op.name}: pad_type {pad_type}")


def _conv_transpose(
    op, x, weight, bias=None, pad=None, output_shape=None, pad_type=None, strides=None, dilations=None, groups=None
):
    x, weight = _f32(x), _f32(weight)
    if x.ndim != 3 or (groups is not None and int(_scalar(groups)) != 1):
        raise UnsupportedOp(f"conv_transpose {op.name}: only 1-D, groups 1")
    stride = int(np.asarray(strides).reshape(-1)[0]) if strides is not None else 1
    dilation = int(np.asarray(dilations).reshape(-1)[0]) if dilations is not None else 1
    batch, _, length = x.shape
    kernel = weight.shape[-1]
    full = (length - 1) * stride + dilation * (kernel - 1) + 1
    out = np.zeros((batch, weight.shape[1], full), dtype=np.float32)
    # weight [C_in, C_out, K]: every tap k adds x @ w[:, :, k] at positions k*d + i*s
    products = np.einsum("bcl,cok->bokl", x, weight, optimize=True)
    for tap in range(kernel):
        start = tap * dilation
        out[:, :, start : start + (length - 1) * stride + 1 : stride] += products[:, :, tap]
    mode = str(pad_type) if pad_type is not None else "valid"
    if mode == "custom":
        left, right = (int(v) for v in np.asarray(pad).reshape(-1)[:2])
        out = out[:, :, left : full - right]
    elif mode != "valid":
        raise UnsupportedOp(f"conv_transpose {op.name}: pad_type {mode}")
    if output_shape is not None:
        out = out[:, :, : int(np.asarray(output_shape).reshape(-1)[-1])]
    if bias is not None:
        out = out + _f32(bias)[None, :, None]
    return out


def _pad(op, x, pad, mode=None, constant_val=None):
    x = _f32(x)
    pad = np.asarray(pad).reshape(-1).astype(int)
    dims = len(pad) // 2
    widths = [(0, 0)] * (x.ndim - dims) + [(int(pad[2 * i]), int(pad[2 * i + 1])) for i in range(dims)]
    mode = str(mode) if mode is not None else "constant"
    if mode == "constant":
        return np.pad(x, widths, constant_values=float(_scalar(constant_val)) if constant_val is not None else 0.0)
    if mode in ("reflect", "replicate"):
        return np.pad(x, widths, mode="reflect" if mode == "reflect" else "edge")
    raise UnsupportedOp(f"pad {op.name}: mode {mode}")


def _slice_by_index(op, x, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None):
    rank = x.ndim
    begin, end = np.asarray(begin).reshape(-1), np.asarray(end).reshape(-1)
    stride = np.ones(rank, int) if stride is None else np.asarray(stride).reshape(-1)
    begin_mask = np.zeros(rank, bool) if begin_mask is None else np.asarray(begin_mask).reshape(-1)
    end_mask = np.zeros(rank, bool) if end_mask is None else np.asarray(end_mask).reshape(-1)
    squeeze_mask = np.zeros(rank, bool) if squeeze_mask is None else np.asarray(squeeze_mask).reshape(-1)
    index = []
    for axis in range(rank):
        if squeeze_mask[axis]:
            index.append(int(begin[axis]))
            continue
        start = None if begin_mask[axis] else int(begin[axis])
        stop = None if end_mask[axis] else int(end[axis])
        index.append(slice(start, stop, int(stride[axis])))
    return x[tuple(index)]


def _linear(op, x, weight, bias=None):
    out = _f32(x) @ _f32(weight).T
    return out + _f32(bias) if bias is not None else out


def _cast(op, x, dtype):
    table = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "bool": bool}
    return np.asarray(x).astype(table[str(dtype)])


def _unary(function):
    return lambda op, x: function(_f32(x))


def _binary(function):
    return lambda op, x, y: function(_f32(x), _f32(y))


def _clip(op, x, alpha, beta):
    return np.clip(_f32(x), _f32(alpha), _f32(beta))


def _leaky_relu(op, x, alpha=0.01):
    x = _f32(x)
    return np.where(x >= 0, x, x * np.float32(_scalar(alpha)))


def _elu(op, x, alpha=1.0):
    x = _f32(x)
    return np.where(x > 0, x, np.float32(_scalar(alpha)) * np.expm1(np.minimum(x, 0)))


def _concat(op, values, axis, interleave=False):
    if interleave is not None and bool(_scalar(interleave)):
        raise UnsupportedOp(f"concat {op.name}: interleave")
    return np.concatenate([_f32(v) for v in values], axis=int(_scalar(axis)))


def _axes(axes):
    return tuple(int(a) for a in np.asarray(axes).reshape(-1))


_OPS = {
    "const": lambda op: np.asarray(op.outputs[0].val),
    "cast": _cast,
    "conv": _conv,
    "conv_transpose": _conv_transpose,
    "pad": _pad,
    "slice_by_index": _slice_by_index,
    "concat": _concat,
    "linear": _linear,
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "real_div": _binary(np.divide),
    "maximum": _binary(np.maximum),
    "minimum": _binary(np.minimum),
    "sin": _unary(np.sin),
    "cos": _unary(np.cos),
    "exp": _unary(np.exp),
    "abs": _unary(np.abs),
    "tanh": _unary(np.tanh),
    "clip": _clip,
    "leaky_relu": _leaky_relu,
    "elu": _elu,
    "transpose": lambda op, x, perm: np.transpose(x, _axes(perm)),
    "squeeze": lambda op, x, axes=None: np.squeeze(x, axis=_axes(axes) if axes is not None else None),
    "expand_dims": lambda op, x, axes: np.expand_dims(x, _axes(axes)),
    "reshape": lambda op, x, shape: np.reshape(x, tuple(int(s) for s in np.asarray(shape).reshape(-1))),
    "fill_like": lambda op, ref_tensor, value=0.0: np.full(np.shape(ref_tensor), _scalar(value), np.float32),
    "upsample_nearest_neighbor": lambda op, x, scale_factor_height=1, scale_factor_width=1: np.repeat(
        np.repeat(x, int(_scalar(scale_factor_height)), axis=-2), int(_scalar(scale_factor_width)), axis=-1
    ),
}
SUPPORTED_OPS = frozenset(_OPS)
