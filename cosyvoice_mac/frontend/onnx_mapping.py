"""Open an ONNX model whose weights onnxruntime memory-maps from the file instead of copying them.

An official ONNX file (``speech_tokenizer_v3.onnx``: 0.97 GB) embeds its weights. Opened by path,
onnxruntime parses the whole file into memory and then copies every weight into a tensor of its
own, so the process briefly holds the weights twice. :func:`mapped_model_bytes` instead reads the
file's protobuf structure (without loading it) and returns the model with each large weight turned
into an *external-data reference to its own bytes inside the same file*: location = the file's name,
offset and length of its ``raw_data``. The file is not changed; onnxruntime maps those ranges, so the
weights are file pages (clean: the OS can drop them under pressure, and nothing is copied to load them).

Protobuf wire format only (ONNX's ``ModelProto`` -> field 7 ``graph`` -> field 5 ``initializer``
``TensorProto``: field 9 ``raw_data``, 13 ``external_data``, 14 ``data_location``); tensors stored in
typed fields, and initializers of nested graphs, stay embedded.
"""

from __future__ import annotations

import mmap
from pathlib import Path

GRAPH, INITIALIZER = 7, 5  # ModelProto.graph, GraphProto.initializer
RAW_DATA, EXTERNAL_DATA, DATA_LOCATION, EXTERNAL = 9, 13, 14, 1  # TensorProto fields; DataLocation.EXTERNAL
LENGTH_DELIMITED, VARINT = 2, 0
MIN_MAPPED_BYTES = 4096  # smaller weights stay embedded: mapping them would cost a page each
FOLDER_OPTION = "session.model_external_initializers_file_folder_path"  # where references are resolved


class OnnxStructureError(ValueError):
    """The file is not a protobuf message of the shape an ONNX model has."""


def mapped_model_bytes(path: str | Path, min_bytes: int = MIN_MAPPED_BYTES) -> bytes:
    """The model at ``path`` with every top-level weight of ``min_bytes`` or more referenced, not embedded.

    Open it with ``onnxruntime.InferenceSession(data, options)`` after
    ``options.add_session_config_entry(FOLDER_OPTION, str(path.parent))``: the references name the file
    itself. The result holds the graph only (kilobytes to a few MB for the official files).
    """
    path = Path(path)
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        model = bytearray()
        for number, wire, start, value_start, end in _fields(data, 0, len(data)):
            if number == GRAPH and wire == LENGTH_DELIMITED:
                model += _length_delimited(GRAPH, _graph(data, value_start, end, path.name, min_bytes))
            else:
                model += data[start:end]
        return bytes(model)


def _graph(data, start: int, end: int, location: str, min_bytes: int) -> bytes:
    graph = bytearray()
    for number, wire, field_start, value_start, value_end in _fields(data, start, end):
        if number == INITIALIZER and wire == LENGTH_DELIMITED:
            graph += _length_delimited(INITIALIZER, _tensor(data, value_start, value_end, location, min_bytes))
        else:
            graph += data[field_start:value_end]
    return bytes(graph)


def _tensor(data, start: int, end: int, location: str, min_bytes: int) -> bytes:
    """One TensorProto, its ``raw_data`` replaced by a reference to where those bytes lie in the file."""
    raw, rest = None, bytearray()
    for number, wire, field_start, value_start, value_end in _fields(data, start, end):
        if number == RAW_DATA and wire == LENGTH_DELIMITED:
            raw = (value_start, value_end)
        elif number in (EXTERNAL_DATA, DATA_LOCATION):  # already external: leave the tensor as it is
            return bytes(data[start:end])
        else:
            rest += data[field_start:value_end]
    if raw is None or raw[1] - raw[0] < min_bytes:
        return bytes(data[start:end])
    for key, value in (("location", location), ("offset", str(raw[0])), ("length", str(raw[1] - raw[0]))):
        entry = _length_delimited(1, key.encode()) + _length_delimited(2, value.encode())  # StringStringEntryProto
        rest += _length_delimited(EXTERNAL_DATA, entry)
    return bytes(rest + _varint_bytes(DATA_LOCATION << 3 | VARINT) + _varint_bytes(EXTERNAL))


# protobuf wire format -------------------------------------------------------------------------
def _varint(data, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data):
            raise OnnxStructureError("the file ends inside a number")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift > 63:
            raise OnnxStructureError("a number is longer than ten bytes")


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _varint_bytes(number << 3 | LENGTH_DELIMITED) + _varint_bytes(len(payload)) + payload


def _fields(data, start: int, end: int):
    """(field number, wire type, field start, value start, value end) of each field in ``data[start:end]``."""
    position = start
    while position < end:
        field_start = position
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value_start, (_, value_end) = position, _varint(data, position)
        elif wire == 1:  # 64-bit
            value_start, value_end = position, position + 8
        elif wire == LENGTH_DELIMITED:
            length, value_start = _varint(data, position)
            value_end = value_start + length
        elif wire == 5:  # 32-bit
            value_start, value_end = position, position + 4
        else:
            raise OnnxStructureError(f"wire type {wire} at byte {field_start} is not one ONNX uses")
        if number == 0 or value_end > end:
            raise OnnxStructureError(f"a field at byte {field_start} runs past its message")
        yield number, wire, field_start, value_start, value_end
        position = value_end
