"""Give a network built on ``meta`` the checkpoint's memory-mapped tensors, converting them part by part.

On the CPU in float32 a parameter *is* the file's memory-mapped tensor: nothing is copied and the OS may
drop the pages again under memory pressure. Every tensor that is copied on the way (converted to another
dtype or device, or concatenated into a fused projection by a load hook) hands its file pages back with
``madvise(MADV_DONTNEED)``: reading it for the copy made them resident, and they would otherwise stay in
the process next to the copy for as long as any tensor keeps the mapping alive. Parts of at most
PART_BYTES are done at a time, so the copies of one part exist at once, never those of a whole network.
"""

from __future__ import annotations

import ctypes
import sys
import warnings
from collections.abc import Callable

import torch
from torch import nn

from cosyvoice_mac.checkpoint import CheckpointError, load_checkpoint, load_strict
from cosyvoice_mac.pipeline.model_dir import ModelFolder

_MADV_DONTNEED = 4  # same value on Linux and macOS
PART_BYTES = 64 * 2**20  # checkpoint bytes assigned and converted at a time (one LLM decoder layer is 60 MB)

# per-tensor conversion ------------------------------------------------------------------------
Converter = Callable[[nn.Module, str, torch.Tensor], torch.Tensor]


def convert_own_tensors(module: nn.Module, convert: Converter) -> None:
    """Replace ``module``'s own parameters and buffers by their converted versions, one at a time."""
    for table in (module._parameters, module._buffers):
        for name, tensor in list(table.items()):
            if tensor is None:
                continue
            converted = convert(module, name, tensor.detach())
            table[name] = nn.Parameter(converted, requires_grad=False) if table is module._parameters else converted


def _drop_pages_not_in_use(tensors, module: nn.Module, file_backed: set[int]) -> None:
    """Hand back the file pages of those checkpoint ``tensors`` that ``module`` no longer uses.

    They were copied: converted to another dtype or device, or concatenated into a fused weight by a
    load hook. Reading them for the copy made their pages resident; without this they stay in the
    process's memory next to the copy for as long as any tensor keeps the mapping alive.
    """
    in_use = {tensor.untyped_storage().data_ptr() for tensor in (*module.parameters(), *module.buffers())}
    for tensor in tensors:
        storage = tensor.untyped_storage().data_ptr()
        if storage in file_backed and storage not in in_use:
            _drop_file_pages(tensor)


def _drop_file_pages(tensor: torch.Tensor) -> None:
    """Tell the OS this memory-mapped tensor's pages are no longer needed (best effort).

    Only for tensors backed by a private mapping of a checkpoint file: their pages are clean
    and come back from the file if touched again, so dropping them is always safe.
    """
    libc = _libc()
    if libc is None:
        return
    storage = tensor.untyped_storage()
    page = _page_size()
    start = (storage.data_ptr() + page - 1) // page * page
    end = (storage.data_ptr() + storage.nbytes()) // page * page
    if end > start:
        libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_DONTNEED)


def _libc():
    if sys.platform not in ("linux", "darwin"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        return libc
    except (OSError, AttributeError):
        return None


def _page_size() -> int:
    import mmap

    return mmap.PAGESIZE


def assign_checkpoint(module: nn.Module, folder: ModelFolder, name: str, convert: Converter, ignore=()) -> None:
    """Make ``module`` (on meta) use the checkpoint's memory-mapped tensors, converted one by one."""
    path = folder.file(name)
    state = load_checkpoint(path, hub_repo=folder.hub_repo)
    with warnings.catch_warnings():  # on meta parameters the copy is a no-op: this call only checks keys and shapes
        warnings.filterwarnings("ignore", message=".*meta parameter.*")
        load_strict(module, state, source=str(folder.path / name), ignore=ignore)
    kept = {key: value for key, value in state.items() if key not in set(ignore)}
    file_backed = {tensor.untyped_storage().data_ptr() for tensor in kept.values()}
    del state
    _assign_in_parts(module, kept, "", convert, file_backed)
    leftover = [key for key, tensor in (*module.named_parameters(), *module.named_buffers()) if tensor.is_meta]
    if leftover:
        raise CheckpointError(f"{path}: no values for {', '.join(leftover[:5])} after loading")


def _assign_in_parts(
    module: nn.Module, state: dict[str, torch.Tensor], prefix: str, convert: Converter, file_backed: set[int]
) -> None:
    """Assign, convert and hand back the file pages of ``module``'s checkpoint tensors (``state``'s keys under
    ``prefix``, popped), a part of at most PART_BYTES at a time (one decoder layer of the LLM).

    So the copies made on the way (fused q/k/v and gate/up, 16-bit weights) exist for one part at a time,
    and each part's file pages are gone before the next part is read. A module whose load hook combines
    keys (a fused projection) or that has no children is one part whatever its size. The keys and shapes
    were checked against the whole model before (``load_strict``), so each part loads non-strictly.
    """
    mine = [key for key in state if key.startswith(prefix)]
    children = dict(module.named_children())
    size = sum(state[key].nbytes for key in mine)
    if not children or module._load_state_dict_pre_hooks or size <= PART_BYTES:
        part = {key[len(prefix) :]: state.pop(key) for key in mine}
        module.load_state_dict(part, strict=False, assign=True)
        for sub in module.modules():
            convert_own_tensors(sub, convert)
        _drop_pages_not_in_use(part.values(), module, file_backed)
        return
    own = {key[len(prefix) :]: state.pop(key) for key in mine if "." not in key[len(prefix) :]}
    if own:  # the module's own parameters and buffers; its children follow one by one
        module.load_state_dict(own, strict=False, assign=True)
        convert_own_tensors(module, convert)
        _drop_pages_not_in_use(own.values(), module, file_backed)
    for name, child in children.items():
        _assign_in_parts(child, state, f"{prefix}{name}.", convert, file_backed)
