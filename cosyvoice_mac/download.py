"""``bash run.sh download cosyvoice3``: fetch a model folder, only the files inference reads (spec section 1).

Hugging Face first (huggingface_hub: resumable, with a progress bar), ModelScope as the fallback when
the hub cannot be reached (plain HTTP, ``download_modelscope``: no package to install). Every file's size is
checked against the hub's own metadata afterwards, so a cut-off download is caught here, not at load time.
Running the command again resumes: finished files are skipped, half-finished ones continue.
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import os
import re
import shutil
import sys
import urllib.error
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cosyvoice_mac.paths import atomic_write, default_models_dir
from cosyvoice_mac.pipeline.model_dir import HUB_REPOS, LLM_CHOICE_FILE, RL_LLM_FILE, VERSIONS, inference_files
from cosyvoice_mac.versions import SPECS

SOURCES = ("auto", "huggingface", "modelscope")
METADATA_TIMEOUT_S = 15.0
DOWNLOAD_WORKERS = 4


@dataclass(frozen=True)
class HubModel:
    """Where one model version is published and the folder name it gets under models/."""

    version: str
    folder: str
    huggingface: str
    modelscope: str


MODELS = {
    "cosyvoice3": HubModel(
        "cosyvoice3", "Fun-CosyVoice3-0.5B", HUB_REPOS["cosyvoice3"], "FunAudioLLM/Fun-CosyVoice3-0.5B-2512"
    ),
    "cosyvoice2": HubModel("cosyvoice2", "CosyVoice2-0.5B", HUB_REPOS["cosyvoice2"], "iic/CosyVoice2-0.5B"),
}


RESUME = "Run the same command again to resume."


class DownloadError(RuntimeError):
    """The download could not finish. ``reason`` says why in plain words (no library's wrapping, no errno),
    ``fix`` what to do about the world (free space, a connection); ``resumable`` that starting it again
    continues where it stopped. ``str()`` is the terminal's message (``RESUME`` said there); the page says its
    own words for starting again (``webui.download_panel``)."""

    def __init__(self, reason: str, *, fix: str = "", resumable: bool = False):
        self.reason, self.fix, self.resumable = reason, fix, resumable
        said = " ".join(part for part in (fix, RESUME if resumable else "") if part)
        super().__init__(f"{reason}. {said}" if said else reason)


class HubUnreachable(DownloadError):
    """No answer from the hubs at all (offline, DNS, firewall, HF_HUB_OFFLINE=1); ``tried`` names them in the
    order they were asked ("huggingface", "modelscope")."""

    def __init__(self, reason: str, *, tried: tuple[str, ...], fix: str = ""):
        super().__init__(reason, fix=fix)
        self.tried = tried


def download_model(
    version: str,
    models_dir: str | Path | None = None,
    *,
    source: str = "auto",
    endpoint: str | None = None,
    revision: str | None = None,
    rl: bool = False,
    on_plan: Callable[[str, dict[str, int | None]], None] | None = None,
    modelscope_endpoint: str | None = None,
) -> Path:
    """Fetch ``version``'s inference files into ``models_dir/<folder>``; the folder's path.

    ``rl`` (CosyVoice3) also fetches ``llm.rl.pt`` and records in the folder that the app should use it.
    ``on_plan(source, sizes)`` is told which hub delivers and each file's size (None: not known) before the
    bytes flow, so a page can show progress by watching the folder.

    ``endpoint`` overrides the Hugging Face address (default: $HF_ENDPOINT or huggingface.co),
    ``modelscope_endpoint`` ModelScope's (default: www.modelscope.cn).
    Raises DownloadError (HubUnreachable when offline) with a message for the user.
    """
    if version not in MODELS:
        raise DownloadError(f"unknown model {version!r}; choose one of: {', '.join(VERSIONS)}")
    if source not in SOURCES:
        raise DownloadError(f"unknown source {source!r}; choose one of: {', '.join(SOURCES)}")
    if rl and not SPECS[version].rl_llm:
        raise DownloadError(f"--rl is for cosyvoice3 (only Fun-CosyVoice3 publishes {RL_LLM_FILE})")
    model, files = MODELS[version], inference_files(version) + [RL_LLM_FILE] * rl
    destination = Path(models_dir if models_dir is not None else default_models_dir()).expanduser() / model.folder
    hubs = (endpoint, modelscope_endpoint)
    folder = _fetch(model, files, destination, source, hubs, revision, on_plan or _no_plan)
    if rl:  # the user's choice, kept beside the files (COSYVOICE_LLM=base overrides it)
        atomic_write(folder / LLM_CHOICE_FILE, (json.dumps({"llm": RL_LLM_FILE}) + "\n").encode("utf-8"))
    return folder


def _no_plan(source: str, sizes: dict[str, int | None]) -> None:
    pass


def _fetch(
    model: HubModel,
    files: list[str],
    destination: Path,
    source: str,
    hubs: tuple[str | None, str | None],
    revision: str | None,
    on_plan: Callable[[str, dict[str, int | None]], None],
) -> Path:
    """From the hub ``source`` names (``auto``: Hugging Face, then ModelScope when Hugging Face cannot be
    reached); ``hubs`` the (Hugging Face, ModelScope) addresses, None for the defaults."""
    if source in ("auto", "huggingface"):
        try:
            return _from_huggingface(model, files, destination, hubs[0], revision, on_plan)
        except HubUnreachable as error:
            if source == "huggingface":
                raise
            print(f"{error}\nTrying ModelScope instead.", file=sys.stderr)
    try:
        return _from_modelscope(model, files, destination, hubs[1], revision, on_plan)
    except HubUnreachable as error:
        if source != "auto":
            raise
        raise HubUnreachable(error.reason, tried=("huggingface", "modelscope"), fix=error.fix) from error


def verify_sizes(destination: Path, expected: dict[str, int]) -> None:
    """Raise DownloadError naming every file that is missing or whose size differs from ``expected``."""
    problems = []
    for name, size in sorted(expected.items()):
        path = destination / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif size is not None and path.stat().st_size != size:
            problems.append(f"{name} has {path.stat().st_size:,} bytes, the hub says {size:,}")
    if problems:
        raise DownloadError(f"the download into {destination} is incomplete: {'; '.join(problems)}", resumable=True)


def _from_huggingface(
    model: HubModel,
    files: list[str],
    destination: Path,
    endpoint: str | None,
    revision: str | None,
    on_plan: Callable[[str, dict[str, int | None]], None],
) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError

    address, expected = _huggingface_sizes(model, files, endpoint, revision)
    absent = [name for name in files if name not in expected]
    if absent:
        raise DownloadError(f"{model.huggingface} on {address} lacks {', '.join(absent)}; is it the right repo?")
    _check_free_space(destination, expected)
    on_plan("huggingface", dict(expected))
    print(
        f"Downloading {len(files)} files ({sum(expected.values()) / 1e9:.2f} GB) of {model.huggingface} "
        f"into {destination}",
        file=sys.stderr,
    )
    try:
        snapshot_download(
            model.huggingface,
            revision=revision,
            local_dir=destination,
            allow_patterns=files,
            endpoint=endpoint,
            etag_timeout=METADATA_TIMEOUT_S,
            max_workers=DOWNLOAD_WORKERS,
        )
    except _connection_errors() as error:
        raise DownloadError(f"the connection to {address} broke off ({_plain(error)})", resumable=True) from error
    except OSError as error:
        raise _unwritable(destination, error) from error
    except HfHubHTTPError as error:
        raise DownloadError(f"{address} stopped the download ({_plain(error)})", resumable=True) from error
    verify_sizes(destination, expected)
    return destination


def _huggingface_sizes(
    model: HubModel, files: list[str], endpoint: str | None, revision: str | None
) -> tuple[str, dict[str, int]]:
    """(the hub's address, each listed file's size in bytes) as Hugging Face announces them; no download."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    address = endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    api = HfApi(endpoint=endpoint)
    try:
        listed = api.get_paths_info(model.huggingface, files, revision=revision)
    except (RepositoryNotFoundError, RevisionNotFoundError) as error:
        raise DownloadError(
            f"{address} has no model {model.huggingface}"
            f"{f' at revision {revision}' if revision else ''} ({_plain(error)})"
        ) from error
    except HfHubHTTPError as error:
        raise DownloadError(
            f"{address} refused the file list of {model.huggingface} ({_plain(error)})", fix="Try again later."
        ) from error
    except _connection_errors() as error:
        raise _unreachable(address, error) from error
    expected = {
        entry.path: (entry.lfs.size if entry.lfs is not None else entry.size)
        for entry in listed
        if hasattr(entry, "size")
    }
    return address, expected


def announced_size(version: str, *, endpoint: str | None = None) -> int:
    """The bytes ``version``'s inference files take, as the hub announces them (what the page shows on its
    download button before anything is fetched). DownloadError (HubUnreachable offline) when it cannot say."""
    model, files = MODELS[version], inference_files(version)
    address, expected = _huggingface_sizes(model, files, endpoint, None)
    absent = [name for name in files if name not in expected]
    if absent:
        raise DownloadError(f"{model.huggingface} on {address} lacks {', '.join(absent)}")
    return sum(expected.values())


def _from_modelscope(
    model: HubModel,
    files: list[str],
    destination: Path,
    endpoint: str | None,
    revision: str | None,
    on_plan: Callable[[str, dict[str, int | None]], None],
) -> Path:
    from cosyvoice_mac import download_modelscope as modelscope

    address = endpoint or modelscope.MODELSCOPE_ENDPOINT
    try:
        listed = modelscope.list_files(model.modelscope, revision, endpoint)
    except urllib.error.HTTPError as error:
        raise DownloadError(f"{address} refused the file list of {model.modelscope} ({_plain(error)})") from error
    except (OSError, http.client.HTTPException) as error:
        raise HubUnreachable(
            f"cannot reach {address} either: no connection ({_plain(error)})",
            tried=("modelscope",),
            fix="Check the internet connection and run the command again; a model folder copied by hand into "
            "models/ works too.",
        ) from error
    except ValueError as error:
        raise DownloadError(f"{address} gave no usable file list of {model.modelscope}: {error}") from error
    absent = [name for name in files if name not in listed]
    if absent:
        raise DownloadError(f"{model.modelscope} on {address} lacks {', '.join(absent)}; is it the right repo?")
    sizes = {name: listed[name].size for name in files}
    _check_free_space(destination, {name: size for name, size in sizes.items() if size is not None})
    on_plan("modelscope", sizes)
    print(f"Downloading {len(files)} files of {model.modelscope} from {address} into {destination}", file=sys.stderr)
    for name in files:
        try:
            modelscope.fetch_file(model.modelscope, listed[name], destination, revision, endpoint)
        except ValueError as error:
            raise DownloadError(str(error), fix="Run the same command again to fetch it anew.") from error
        except (OSError, http.client.HTTPException) as error:
            if isinstance(error, OSError) and not isinstance(error, urllib.error.URLError) and error.filename:
                raise _unwritable(destination, error) from error
            raise DownloadError(
                f"the download of {name} from {address} stopped ({_plain(error)})", resumable=True
            ) from error
    verify_sizes(destination, sizes)
    return destination


def _check_free_space(destination: Path, expected: dict[str, int]) -> None:
    needed = sum(size - _present_bytes(destination / name, size) for name, size in expected.items())
    probe = destination
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed > free:
        raise DownloadError(
            f"the download needs {needed / 1e9:.1f} GB more but {probe} has only {free / 1e9:.1f} GB free",
            fix="Free some space.",
            resumable=True,
        )


def _present_bytes(path: Path, size: int) -> int:
    return min(path.stat().st_size, size) if path.is_file() else 0


def _connection_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "no connection", for the HTTP library this huggingface_hub uses."""
    from huggingface_hub.utils import OfflineModeIsEnabled

    errors: list[type[BaseException]] = [OfflineModeIsEnabled]
    for module_name, names in (
        ("httpx2", ("TransportError",)),
        ("httpx", ("TransportError",)),
        ("requests", ("ConnectionError", "Timeout")),
    ):
        if importlib.util.find_spec(module_name) is not None:
            module = importlib.import_module(module_name if module_name != "requests" else "requests.exceptions")
            errors.extend(getattr(module, name) for name in names)
    return tuple(errors)


def _unreachable(address: str, error: BaseException) -> HubUnreachable:
    if type(error).__name__ == "OfflineModeIsEnabled":
        why = "HF_HUB_OFFLINE is set, so huggingface_hub will not go online"
    else:
        why = f"no connection ({_plain(error)})"
    return HubUnreachable(
        f"cannot reach {address}: {why}",
        tried=("huggingface",),
        fix="Check the internet connection (or HF_ENDPOINT) and run the command again; a model folder copied by "
        "hand into models/ works too.",
    )


def _unwritable(destination: Path, error: OSError) -> DownloadError:
    return DownloadError(
        f"could not write into {destination} ({_plain(error)})",
        fix="Free some space or fix the folder's permissions.",
        resumable=True,
    )


_ERRNO = re.compile(r"\[Errno -?\d+\]\s*")


def _plain(error: BaseException) -> str:
    """An exception's first line as words for a person: urllib's ``<urlopen error ...>`` unwrapped, an OS error
    by its own words ("Connection refused", "Name or service not known"), never its ``[Errno N]``."""
    if isinstance(error, urllib.error.URLError) and not isinstance(error, urllib.error.HTTPError):
        reason = error.reason
        return _plain(reason) if isinstance(reason, BaseException) else _ERRNO.sub("", str(reason))
    if isinstance(error, OSError) and error.strerror and not isinstance(error, urllib.error.HTTPError):
        return error.strerror
    text = str(error).strip() or type(error).__name__
    return _ERRNO.sub("", text.splitlines()[0]).strip() or type(error).__name__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bash run.sh download",
        description=(
            "Download a CosyVoice model into models/: only the files inference needs. Run it again to resume."
        ),
    )
    parser.add_argument("model", choices=VERSIONS, help="cosyvoice3 (Fun-CosyVoice3-0.5B) or cosyvoice2")
    parser.add_argument("--models-dir", type=Path, default=None, help="default: $COSYVOICE_MODELS_DIR, else models/")
    parser.add_argument(
        "--source",
        choices=SOURCES,
        default="auto",
        help="auto: Hugging Face, then ModelScope when Hugging Face cannot be reached",
    )
    parser.add_argument("--revision", default=None, help="a branch, tag or commit of the hub repo (default main)")
    parser.add_argument(
        "--rl",
        action="store_true",
        help=f"cosyvoice3: also fetch {RL_LLM_FILE} (2 GB, the "
        "reinforcement-tuned LLM upstream reports better: zh CER 0.81 vs 1.21, en WER 1.68 vs 2.24) "
        "and use it",
    )
    args = parser.parse_args(argv)
    try:
        folder = download_model(args.model, args.models_dir, source=args.source, revision=args.revision, rl=args.rl)
    except DownloadError as error:
        print(f"download failed: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ndownload interrupted; run the same command again to resume it", file=sys.stderr)
        return 130
    if args.rl:
        print(f"The app will use {RL_LLM_FILE} (its status panel says so); COSYVOICE_LLM=base goes back to llm.pt.")
    print(f"{args.model} is ready in {folder}. Start the app with: bash run.sh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
