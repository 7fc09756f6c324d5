"""Model downloads from the page: a button per model, a progress bar (bytes, speed, time left) while the
download runs in the background, and the switch to the new model when it is complete, without a restart.

The download itself is ``cosyvoice_mac.download`` (the CLI's: resumable, Hugging Face then ModelScope, sizes
checked); progress is read from the model folder as it fills, against the sizes the hub announced. One
download runs at a time for the whole app (``Downloads`` owns it); every tab that presses the button follows it.
Element ids (``elem_id``) are the browser tests' handles; keep them stable.
"""

from __future__ import annotations

import html
import threading
import time
from pathlib import Path
from typing import Iterator

import gradio as gr

from cosyvoice_mac.download import MODELS, DownloadError, HubUnreachable, announced_size, download_model
from cosyvoice_mac.webui.render import size_text
from cosyvoice_mac.webui.strings import Markup
from cosyvoice_mac.webui.strings import text as say

POLL_S = 0.5
SIZE_RETRY_S = 300.0  # an unanswered size question is asked again after five minutes
SPEED_WINDOW_S = 5.0  # the speed is averaged over the last few seconds


def folder_bytes(folder: Path) -> int:
    """Bytes under ``folder`` so far, unfinished downloads included (huggingface_hub keeps them in .cache)."""
    total = 0
    for path in folder.rglob("*") if folder.is_dir() else ():
        try:
            total += path.stat().st_size if path.is_file() else 0
        except OSError:  # renamed while we looked
            pass
    return total


class DownloadJob:
    """One model's download in a background thread: where it goes, what the hub announced, how it ended."""

    def __init__(self, version: str, models_dir: Path, hubs: tuple[str | None, str | None] = (None, None)):
        self.version = version
        self.destination = Path(models_dir) / MODELS[version].folder
        self.source: str | None = None
        self.total: int | None = None
        self.error: DownloadError | None = None
        self.folder: Path | None = None
        self.finished = threading.Event()
        self._samples: list[tuple[float, int]] = []  # (monotonic time, bytes) for the speed
        self._start_bytes = folder_bytes(self.destination)  # a resumed download starts from what is there
        self._thread = threading.Thread(target=self._run, args=(models_dir, hubs), name="model-download", daemon=True)
        self._thread.start()

    def _plan(self, source: str, sizes: dict[str, int | None]) -> None:
        self.source = source
        self.total = sum(size for size in sizes.values() if size) or None

    def _run(self, models_dir: Path, hubs: tuple[str | None, str | None]) -> None:
        try:
            self.folder = download_model(
                self.version, models_dir, on_plan=self._plan, endpoint=hubs[0], modelscope_endpoint=hubs[1]
            )
        except DownloadError as error:
            self.error = error
        except Exception as error:  # noqa: BLE001 - shown to the user; the page must keep working
            self.error = DownloadError(f"{type(error).__name__}: {error}", resumable=True)
        finally:
            self.finished.set()

    def progress(self) -> dict:
        """Bytes done and announced, the speed (bytes/s) and seconds left (None until known)."""
        now, done = time.monotonic(), folder_bytes(self.destination)
        if self.total:
            done = min(done, self.total)
        self._samples.append((now, done))
        self._samples = [sample for sample in self._samples if now - sample[0] <= SPEED_WINDOW_S]
        first_time, first_bytes = self._samples[0]
        speed = (done - first_bytes) / (now - first_time) if now - first_time > 0.2 else None
        left = (self.total - done) / speed if speed and self.total else None
        return {"done": done, "total": self.total, "speed": speed, "left": left, "resumed": self._start_bytes}


class Downloads:
    """Owns the app's one running (or last) model download, and each model's size as the hub announced it."""

    def __init__(self, models_dir: Path, endpoint: str | None = None, modelscope_endpoint: str | None = None):
        self.models_dir = Path(models_dir)
        self.endpoint = endpoint  # the hub asked for sizes (None: $HF_ENDPOINT or huggingface.co)
        self.modelscope_endpoint = modelscope_endpoint  # the fallback (None: www.modelscope.cn)
        self.current: DownloadJob | None = None
        self._lock = threading.Lock()
        self._sizes: dict[str, int | None] = {}  # by version; None: the hub could not say (offline)
        self._asked_at: dict[str, float] = {}

    def size(self, version: str) -> int | None:
        """The bytes ``version`` will take, asked of the hub once (again after SIZE_RETRY_S when it failed)."""
        with self._lock:
            known, asked = self._sizes.get(version), self._asked_at.get(version)
            if known is not None or (asked is not None and time.monotonic() - asked < SIZE_RETRY_S):
                return known
            self._asked_at[version] = time.monotonic()
        try:
            size = announced_size(version, endpoint=self.endpoint)
        except DownloadError:
            size = None
        except Exception:  # noqa: BLE001 - a size is a courtesy: the button works without it
            size = None
        with self._lock:
            self._sizes[version] = size
        return size

    def known_size(self, version: str) -> int | None:
        """The size already asked for, without asking."""
        with self._lock:
            return self._sizes.get(version)

    def start(self, version: str) -> DownloadJob:
        """The running download (whatever model it is), else a new one of ``version``."""
        with self._lock:
            if self.current is None or self.current.finished.is_set():
                self.current = DownloadJob(version, self.models_dir, (self.endpoint, self.modelscope_endpoint))
            return self.current


def failure_html(lang: str, error: DownloadError) -> str:
    """Why the download stopped, as sentences for a person on this page: what was tried and what to press, never
    an errno or the terminal's "run the command again"."""
    if isinstance(error, HubUnreachable) and len(error.tried) > 1:
        return say(lang, "dl_offline")
    # html.escape, not the Markdown escape: this goes into HTML, where a path's "_" or "[" must stay itself
    words = say(lang, "dl_failed", message=Markup(html.escape(error.reason.rstrip("."))))
    return f"{words} {say(lang, 'dl_again')}" if error.resumable else words


def progress_html(lang: str, job: DownloadJob, progress: dict) -> str:
    """A <progress> bar and "1.2 GB of 5.0 GB, 12 MB/s, about 5 min left (from Hugging Face)"."""
    done, total = progress["done"], progress["total"]
    words = [say(lang, "dl_bytes", done=size_text(done), total=size_text(total) if total else "?")]
    if progress["speed"]:
        words.append(say(lang, "dl_speed", speed=size_text(progress["speed"])))
    if progress["left"] is not None:
        words.append(say(lang, "dl_left", minutes=int(progress["left"] // 60), seconds=int(progress["left"] % 60)))
    if job.source:
        words.append(say(lang, f"dl_from_{job.source}"))
    if progress["resumed"]:
        words.append(say(lang, "dl_resumed", done=size_text(progress["resumed"])))
    bar = f'<progress id="cv-dl-progress" value="{done}" max="{total or 0}"></progress>' if total else ""
    name = html.escape(MODELS[job.version].folder)
    # say() has made its values safe text already (``strings.escape``): escaped again, entities showed raw
    return f"<div><b>{name}</b> {bar} <span id='cv-dl-words'>{', '.join(words)}</span></div>"


class DownloadCallbacks:
    """The download buttons' callbacks, mixed into ``callbacks.Callbacks`` (which provides ``host``,
    ``downloads``, ``switch_model``, ``model_choices`` and ``status_panel``)."""

    def download(self, lang: str, version: str) -> Iterator[tuple]:
        """Download ``version`` (or follow the download already running), then switch to it.
        Yields (download message, model menu, model message, status panel)."""
        if version not in MODELS:
            yield say(lang, "dl_unknown"), gr.skip(), gr.skip(), gr.skip()
            return
        job = self.downloads.start(version)
        while not job.finished.wait(POLL_S):
            yield progress_html(lang, job, job.progress()), gr.skip(), gr.skip(), gr.skip()
        if job.error:
            yield failure_html(lang, job.error), gr.skip(), gr.skip(), gr.skip()
            return
        name = job.folder.name
        menu = gr.update(choices=self.model_choices(lang), value=name, interactive=True)
        done = say(lang, "dl_done", name=name)
        yield done, menu, gr.skip(), self.status_panel(lang)
        for model_msg, panel in self.switch_model(lang, name):
            yield done, gr.skip(), model_msg, panel


def build_download_panel(make, callbacks, has_model: bool) -> dict:
    """A button per model; open when no model is installed (the first thing a newcomer needs)."""
    controls: dict = {"buttons": {}}
    with make(gr.Accordion, {"label": "dl_heading"}, open=not has_model, elem_id="cv-download"):
        make(gr.Markdown, {"value": "dl_info"}, elem_classes="cv-message")
        with gr.Row():
            for index, (version, model) in enumerate(MODELS.items()):  # the newest model first, and primary
                controls["buttons"][version] = make(
                    gr.Button,
                    {"value": lambda lang, version=version: button_label(lang, version, callbacks.downloads)},
                    size="sm",
                    variant="primary" if index == 0 else "secondary",
                    elem_id=f"cv-download-{version}",
                )
        controls["msg"] = gr.HTML(elem_id="cv-download-msg")
    return controls


def button_label(lang: str, version: str, downloads: "Downloads", size: int | None = None) -> str:
    """ "Download Fun-CosyVoice3-0.5B (5.2 GB)": the size once the hub has said it."""
    label = say(lang, "dl_button", name=MODELS[version].folder)
    size = size if size is not None else downloads.known_size(version)
    return f"{label} ({size_text(size)})" if size else label


def wire_download_panel(controls: dict, callbacks, language, panel, page) -> None:
    versions = list(controls["buttons"])

    def with_sizes(lang: str):  # asked of the hub when a tab opens (once per model, cached)
        return [
            gr.update(value=button_label(lang, v, callbacks.downloads, callbacks.downloads.size(v))) for v in versions
        ]

    page.load(with_sizes, language, [controls["buttons"][v] for v in versions], queue=False, show_progress="hidden")
    outputs = [controls["msg"], panel.model_menu, panel.model_msg, panel.status_panel]
    for version, button in controls["buttons"].items():
        button.click(
            _downloader(callbacks, version),
            language,
            outputs,
            concurrency_id="download",
            concurrency_limit=None,  # every tab that presses follows the one download
            show_progress="hidden",
        )


def _downloader(callbacks, version: str):
    def download(lang: str):
        yield from callbacks.download(lang, version)

    return download
