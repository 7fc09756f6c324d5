"""Where the app keeps its files, where it listens, and the one way it writes a file. Torch-free.

Every folder rule lives here, read when asked (not at import), so an environment variable set by a test
or a launcher reaches every interface the same way:

* models: ``$COSYVOICE_MODELS_DIR``, else ``models/`` of the checkout (``bash run.sh``), else the user's
  data folder (an installed ``cosyvoice-mac`` command has no checkout beside it);
* outputs: ``$COSYVOICE_OUTPUTS_DIR``, else ``outputs/`` beside the models' default in the same way;
* the per-user cache (speaker cache, saved voices, recogniser models): :func:`user_cache_dir`;
* the address of the app serving that cache, which the CLI looks up: :func:`running_app_url`.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

APP_NAME = "cosyvoice-mac"
DEFAULT_HOST = "127.0.0.1"  # this computer only; another address only when the user asks for it
DEFAULT_PORT = 7860
MODELS_VARIABLE = "COSYVOICE_MODELS_DIR"
OUTPUTS_VARIABLE = "COSYVOICE_OUTPUTS_DIR"
CACHE_VARIABLE = "COSYVOICE_CACHE_DIR"
CHECKOUT = Path(__file__).resolve().parents[1]  # the folder holding run.sh, when this is a checkout


def is_checkout() -> bool:
    """True when the package runs from its source folder (``bash run.sh``), not from an installed copy."""
    return (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / "cosyvoice_mac").is_dir()


def user_data_dir() -> Path:
    """~/Library/Application Support/cosyvoice-mac (macOS), else $XDG_DATA_HOME (or ~/.local/share)/cosyvoice-mac."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / APP_NAME
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / APP_NAME


def _app_folder(variable: str, name: str) -> Path:
    configured = os.environ.get(variable, "").strip()
    if configured:
        return Path(configured).expanduser()
    return (CHECKOUT if is_checkout() else user_data_dir()) / name


def default_models_dir() -> Path:
    """The folder holding model folders: $COSYVOICE_MODELS_DIR, else models/ (see the module docstring)."""
    return _app_folder(MODELS_VARIABLE, "models")


def default_outputs_dir() -> Path:
    """Where generated audio and its sidecars are saved: $COSYVOICE_OUTPUTS_DIR, else outputs/."""
    return _app_folder(OUTPUTS_VARIABLE, "outputs")


def user_cache_dir() -> Path:
    """$COSYVOICE_CACHE_DIR, else ~/Library/Caches/cosyvoice-mac (macOS), else $XDG_CACHE_HOME
    (or ~/.cache)/cosyvoice-mac."""
    configured = os.environ.get(CACHE_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / APP_NAME
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / APP_NAME


def temporary_folder(name: str) -> Path:
    """``name`` inside the front ends' temporary folder: ``$GRADIO_TEMP_DIR``, which the app points at a folder
    of its own that its janitor sweeps (uploads, copies of results), else the system's temporary folder."""
    return Path(os.environ.get("GRADIO_TEMP_DIR") or tempfile.gettempdir()) / name


def compile_cache_dir() -> Path:
    """Where torch.compile keeps its compiled kernels between runs (the fused LLM step on CUDA: ~30 s to compile
    the first time), inside the user cache folder rather than a temporary folder a reboot empties."""
    return user_cache_dir() / "torch-compile"


def atomic_write(path: str | Path, data: bytes, *, replace: bool = True, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so that a reader, or the disk after a power cut, sees the old file or the
    whole new one, never half (:func:`atomic_file` with ``data`` as its content)."""
    with atomic_file(path, replace=replace, mode=mode) as file:
        file.write(data)


@contextmanager
def atomic_file(path: str | Path, *, replace: bool = True, mode: int = 0o644) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into, for writers that stream (a zip, a safetensors
    file): a temporary file of its own in the same folder (so two writers never share one), flushed to disk
    (fsync) when the block ends, made an ordinary 0644 document (``mode``: 0600 for a secret, which then is
    never readable by others, not even while it is written), then renamed over ``path``. The temporary
    file is removed when anything fails; the error is raised.

    ``replace=False`` never replaces a file already at ``path`` (FileExistsError instead): the whole file is
    hard-linked into place, which fails when the name is taken, so of two writers of one name exactly one
    wins. On a file system without hard links the name is claimed with an exclusive create first (a reader
    may then see it empty for a moment, never half-written)."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)  # mkstemp makes 0600 files; most are the user's documents and settings
        if replace:
            os.replace(temporary, path)
        else:
            _move_exclusively(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS}


def _move_exclusively(temporary: str, path: Path) -> None:
    """Put the finished ``temporary`` at ``path`` unless a file is there already (FileExistsError)."""
    try:
        os.link(temporary, path)
    except FileExistsError:
        raise
    except OSError as error:
        if error.errno not in _NO_HARD_LINKS:
            raise
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))  # the name is ours from here
        os.replace(temporary, path)
        return
    os.unlink(temporary)


RUNNING_APP_FILE = "running-app.json"


def running_app_file(cache_dir: str | Path | None = None) -> Path:
    """Where a serving app records its address: in its cache folder, beside the voice library it serves, so a
    command using that library finds the app on whatever port it listens (:func:`running_app_url`)."""
    return (Path(cache_dir).expanduser() if cache_dir else user_cache_dir()) / RUNNING_APP_FILE


def record_running_app(url: str, cache_dir: str | Path | None = None) -> None:
    """Say that this process serves the app at ``url`` (``serve``, once it listens)."""
    record = running_app_file(cache_dir)
    record.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(record, json.dumps({"url": url, "pid": os.getpid()}).encode())


def forget_running_app(cache_dir: str | Path | None = None) -> None:
    """Remove this process's record (``serve``, closing); a later app's record is left alone."""
    record = running_app_file(cache_dir)
    if _read_record(record).get("pid") == os.getpid():
        record.unlink(missing_ok=True)


def running_app_url(cache_dir: str | Path | None = None) -> str | None:
    """The address the app serving this cache folder recorded, or None when none did or its process is gone
    (an app killed without closing leaves its record behind)."""
    record = _read_record(running_app_file(cache_dir))
    url, pid = record.get("url"), record.get("pid")
    if not isinstance(url, str) or not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)  # signal 0 only asks whether the process exists
    except ProcessLookupError:
        return None
    except PermissionError:  # it exists, run by another user
        pass
    return url


def _read_record(record: Path) -> dict:
    try:
        content = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}
