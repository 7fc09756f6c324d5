"""ModelScope over plain HTTP (the standard library only: the ``modelscope`` package is not needed): the
fallback of ``bash run.sh download`` when Hugging Face cannot be reached.

Two calls of ModelScope's public API: the repo's file list (``/api/v1/models/<id>/repo/files``: each file's
path, size and SHA-256) and a file's bytes (``/api/v1/models/<id>/repo?FilePath=...``). Each file is written
to ``<name>.incomplete`` beside its place, continued with a ``Range`` request when a run stopped half-way,
checked against the listed size and SHA-256, flushed to disk and only then given its name, so a finished
name is always a whole file and running the command again resumes. Errors are the standard library's
(``OSError`` for the network and the disk, ``ValueError`` for an answer that is not what was listed); the
caller says them to the user.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

MODELSCOPE_ENDPOINT = "https://www.modelscope.cn"
DEFAULT_REVISION = "master"  # ModelScope's default branch
TIMEOUT_S = 30.0  # per connection and per read: a stalled transfer fails, and the next run resumes it
BLOCK_BYTES = 1 << 20
PARTIAL_SUFFIX = ".incomplete"


@dataclass(frozen=True)
class ListedFile:
    """One file of a ModelScope repo as its file list gives it (size or SHA-256 None where not given)."""

    path: str
    size: int | None
    sha256: str | None


def list_files(model_id: str, revision: str | None = None, endpoint: str | None = None) -> dict[str, ListedFile]:
    """Every file of ``model_id`` at ``revision`` (path -> ListedFile); ValueError when the answer is not a list."""
    query = urllib.parse.urlencode({"Revision": revision or DEFAULT_REVISION, "Recursive": "true"})
    with urllib.request.urlopen(
        f"{_base(endpoint)}/api/v1/models/{model_id}/repo/files?{query}", timeout=TIMEOUT_S
    ) as answer:
        payload = json.loads(answer.read())
    entries = (payload.get("Data") or {}).get("Files") if isinstance(payload, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"ModelScope's file list of {model_id} has no files (code {payload.get('Code')!r})")
    listed = {}
    for entry in entries:
        if isinstance(entry, dict) and entry.get("Type", "blob") != "tree" and isinstance(entry.get("Path"), str):
            size, digest = entry.get("Size"), entry.get("Sha256")
            listed[entry["Path"]] = ListedFile(
                entry["Path"], int(size) if isinstance(size, int) else None, digest.lower() if digest else None
            )
    return listed


def fetch_file(
    model_id: str,
    listed: ListedFile,
    destination: Path,
    revision: str | None = None,
    endpoint: str | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> Path:
    """``listed`` into ``destination`` (its path kept); a whole file already there is kept, a partial one
    continued. OSError (``http.client.HTTPException`` for a cut transfer) when the bytes stopped coming: the next
    run continues them; ValueError when they are not the listed file (removed: the next run starts it over)."""
    target = destination / listed.path
    if target.is_file() and (listed.size is None or target.stat().st_size == listed.size):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + PARTIAL_SUFFIX)
    have = partial.stat().st_size if partial.is_file() else 0
    if listed.size is not None and have > listed.size:
        have = 0  # not a prefix of this file: start over
    query = urllib.parse.urlencode({"Revision": revision or DEFAULT_REVISION, "FilePath": listed.path})
    request = urllib.request.Request(f"{_base(endpoint)}/api/v1/models/{model_id}/repo?{query}")
    if have:
        request.add_header("Range", f"bytes={have}-")
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
        if have and answer.status != 206:  # the server sent the whole file: take it from its start
            have = 0
        with open(partial, "ab" if have else "wb") as file:
            while block := answer.read(BLOCK_BYTES):
                file.write(block)
                if on_bytes is not None:
                    on_bytes(len(block))
            file.flush()
            os.fsync(file.fileno())
    _check(partial, listed)
    os.replace(partial, target)
    return target


def _check(partial: Path, listed: ListedFile) -> None:
    """OSError when the transfer stopped short (the partial file is kept: the next run continues it);
    ValueError when the file is not the one listed (the partial file is removed: the next run starts over)."""
    size = partial.stat().st_size
    if listed.size is not None and size < listed.size:
        raise OSError(f"the connection broke off after {size:,} of {listed.size:,} bytes of {listed.path}")
    problem = None
    if listed.size is not None and size > listed.size:
        problem = f"{listed.path} arrived with {size:,} bytes, ModelScope lists {listed.size:,}"
    elif listed.sha256 is not None and _sha256(partial) != listed.sha256:
        problem = f"{listed.path} arrived damaged (its SHA-256 is not the one ModelScope lists)"
    if problem:
        partial.unlink(missing_ok=True)
        raise ValueError(problem)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def _base(endpoint: str | None) -> str:
    return (endpoint or MODELSCOPE_ENDPOINT).rstrip("/")
