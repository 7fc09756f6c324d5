"""The model host: which model the app runs and the one Engine that runs it, for every front end.

Owns the rule that picks a model (``pick_model``: a CosyVoice3 folder, else any model folder, else the
preview voice), the model menu's choices, the worker settings a choice runs with, and the app's remembered
choices (``Settings``). The page, the ``/v1`` API, the CLI's own engine and ``load_model`` all use it, so
one rule picks the model everywhere. Nothing here imports gradio or torch: the engine runs the model in its
own process, and these classes can be driven directly by tests.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from cosyvoice_mac.engine.client import Engine
from cosyvoice_mac.engine.jobs import EngineError
from cosyvoice_mac.engine.messages import EngineState
from cosyvoice_mac.engine.transcriber import TranscriberProcess
from cosyvoice_mac.engine.worker import WorkerConfig
from cosyvoice_mac.mlx import ENGINES, requested_engine
from cosyvoice_mac.mlx.llm_gate import LLM_PRECISION_ENV, MLX_LLM_GATE
from cosyvoice_mac.mlx.llm_gate import offered as offered_mlx_llm
from cosyvoice_mac.mlx.llm_gate import refusal as refusal_of_mlx_llm
from cosyvoice_mac.paths import atomic_write, user_cache_dir
from cosyvoice_mac.pipeline.model_dir import ModelFolderError, detect_version
from cosyvoice_mac.preview import PIPELINE_FACTORY as PREVIEW_FACTORY
from cosyvoice_mac.preview import PREVIEW, preview_available
from cosyvoice_mac.settings import choices, env_value, resolve
from cosyvoice_mac.stored import Field, read_json, typed
from cosyvoice_mac.versions import VERSIONS

SETTINGS_FILE = "webui.json"
# The menu value of the preview voice: no folder can be called this ("/" cannot be in a file name), so a
# model folder never shadows it. ``--model preview`` also picks it.
PREVIEW_CHOICE_NAME = "/preview"


@dataclass(frozen=True)
class ModelChoice:
    """One model folder under models/ (its folder name is the menu value), or the preview voice (no path)."""

    name: str
    path: Path | None
    version: str

    @property
    def is_preview(self) -> bool:
        return self.version == PREVIEW


PREVIEW_CHOICE = ModelChoice(PREVIEW_CHOICE_NAME, None, PREVIEW)


def find_models(models_dir: Path) -> list[ModelChoice]:
    """Every folder of ``models_dir`` that ``detect_version`` takes for a model folder, by name."""
    models_dir = Path(models_dir)
    if not models_dir.is_dir():
        return []
    found = []
    for folder in sorted(models_dir.iterdir()):
        if not folder.is_dir():
            continue
        try:
            found.append(ModelChoice(folder.name, folder, detect_version(folder)))
        except ModelFolderError:  # not a model folder (or an unsupported one): the menu leaves it out
            continue
    return found


def pick_model(models_dir: Path, preview: bool = True) -> ModelChoice | None:
    """The app's rule, shared by the page, the CLI and ``load_model``: a CosyVoice3 folder under
    ``models_dir``, else any model folder, else the preview voice (when ``preview``), else None."""
    models = find_models(models_dir)
    newest = [choice for choice in models if choice.version == VERSIONS[0]]
    return (newest or models or ([PREVIEW_CHOICE] if preview else []) or [None])[0]


@dataclass
class HostConfig:
    """Where models, outputs and the cache live, and how the model worker runs."""

    models_dir: Path
    outputs_dir: Path
    cache_dir: Path | None = None
    device: str = "auto"
    dtype: str | None = None
    max_queue: int = 8
    job_timeout_s: float | None = 900.0
    liveness_timeout_s: float = 30.0  # a worker silent this long is killed and replaced
    start_timeout_s: float = 900.0
    torch_threads: int | None = None
    preferred_model: str | None = None
    preview: bool | None = None  # offer the preview voice; None: when its packages are installed
    vocoder: str = "torch"  # "torch" or "coreml:<compute units>" (see VOCODER_CHOICES)
    precision: dict = field(default_factory=dict)  # precision, llm_dtype, flow_dtype, reprobe (CosyVoice models only)
    engine: str = "auto"  # the engine menu: "auto", "mlx" or "torch" (CosyVoice models only; see starting_engine)
    mlx_llm: str = "auto"  # the MLX LLM precision menu: "auto" or a precision the gate passes (starting_mlx_llm)


# The page's vocoder menu: torch, or Core ML on each set of compute units Core ML accepts (the settings table).
VOCODER_CHOICES = ("torch", *(f"coreml:{units}" for units in choices("compute_units")))


class ModelHost:
    """Owns the one Engine the page talks to (which model folder or the preview voice it runs; starting,
    switching, restarting and closing it) and the prompt transcriber. Every visitor shares them; the
    engine's queue keeps their jobs in order."""

    def __init__(
        self,
        config: HostConfig,
        engine_factory: Callable[..., Engine] = Engine,
        transcriber: TranscriberProcess | None = None,
        worker_factory: Callable[[WorkerConfig], object] | None = None,
    ):
        self.config = config
        self.engine_factory = engine_factory
        # None: each engine runs its model in a worker process here; else what runs its jobs (a Ray cluster's
        # workers: ``cluster.queue_worker.ClusterLink``), under the same queue
        self.worker_factory = worker_factory
        self.engine: Engine | None = None
        self.current: ModelChoice | None = None
        self.transcriber = transcriber or TranscriberProcess()  # its process starts on the first request
        self._lock = threading.Lock()
        if config.preview is None:
            config.preview = preview_available()

    def models(self) -> list[ModelChoice]:
        """The CosyVoice model folders under models/."""
        return find_models(self.config.models_dir)

    def choices(self) -> list[ModelChoice]:
        """What the model menu offers: the model folders, then the preview voice when it is installed."""
        return self.models() + ([PREVIEW_CHOICE] if self.config.preview else [])

    def choice(self, name: str | None) -> ModelChoice | None:
        """The choice called ``name`` (a value from the page, so only names we listed count); "preview"
        also names the preview voice unless a model folder is called that."""
        found = next((choice for choice in self.choices() if choice.name == name), None)
        if found is None and name == PREVIEW and self.config.preview:
            return PREVIEW_CHOICE
        return found

    def default_choice(self) -> ModelChoice | None:
        """The preferred choice, else what ``pick_model`` picks."""
        preferred = self.choice(self.config.preferred_model) if self.config.preferred_model else None
        return preferred or pick_model(self.config.models_dir, preview=bool(self.config.preview))

    def start(self, name: str | None = None) -> ModelChoice | None:
        """Start the engine for ``name`` (default: ``default_choice()``) without waiting."""
        choice = self.choice(name) if name else self.default_choice()
        if choice is None:
            return None
        with self._lock:
            old, self.engine = self.engine, None
            self.current = choice
        if old is not None:
            old.close()
        engine = self.engine_factory(
            self.worker_config(choice),
            max_queue=self.config.max_queue,
            start_timeout_s=self.config.start_timeout_s,
            job_timeout_s=self.config.job_timeout_s,
            liveness_timeout_s=self.config.liveness_timeout_s,
            **({"worker_factory": self.worker_factory} if self.worker_factory is not None else {}),
        )
        engine.start(wait=False)
        with self._lock:
            self.engine = engine
        return choice

    def restart(self, timeout: float | None = None) -> bool:
        """Restart the worker of the current model (start it if it never ran); True once it is ready."""
        engine = self.engine
        if engine is None:
            if self.start(self.current.name if self.current else None) is None:
                return False
            engine = self.engine
            return engine.start(wait=True, timeout=timeout)
        try:
            return engine.restart(timeout=timeout)
        except EngineError:  # closed under us: by a model switch (wait for its engine), else start afresh
            if self.engine is None or self.engine is engine:
                self.start(self.current.name if self.current else None)
            return self.engine.start(wait=True, timeout=timeout)

    def status(self) -> dict:
        """The engine's status plus the folder name and version of the model it runs."""
        engine = self.engine
        status = engine.status() if engine is not None else {"state": EngineState.STOPPED}
        if self.current is not None:
            status.update(folder=self.current.name, folder_version=self.current.version)
        if self.current is not None and not self.current.is_preview:
            status["engine_setting"] = self.config.engine
        return status

    def close(self) -> None:
        with self._lock:
            engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()
        self.transcriber.close()

    def worker_config(self, choice: ModelChoice) -> WorkerConfig:
        """How the model worker runs ``choice`` (the CLI's own engine follows the same rule)."""
        config = self.config
        backend = (
            {"model_dir": None, "pipeline_factory": PREVIEW_FACTORY}
            if choice.is_preview
            else {
                "model_dir": str(choice.path),
                "pipeline_kwargs": {**config.precision, "engine": config.engine, "mlx_llm": config.mlx_llm},
            }
        )
        kind, _, units = config.vocoder.partition(":")
        return WorkerConfig(
            **backend,
            device=config.device,
            dtype=config.dtype,
            outputs_dir=str(config.outputs_dir),
            cache_dir=str(config.cache_dir) if config.cache_dir else None,
            torch_threads=config.torch_threads,
            vocoder=kind,
            compute_units=units or "ALL",
        )

    def set_vocoder(self, value: str) -> bool:
        """Run the current model with another vocoder (a VOCODER_CHOICES value); True once it is ready."""
        if value not in VOCODER_CHOICES:
            raise ValueError(f"unknown vocoder choice {value!r}")
        self.config.vocoder = value
        if self.start(self.current.name if self.current else None) is None:
            return False
        return self.engine.start(wait=True)

    def set_engine(self, value: str) -> bool:
        """Run CosyVoice models on ``value`` (an ENGINES name) from now on; True once a worker with it is ready.

        The worker builds its networks for one engine, so the change restarts it with the new choice, as
        Restart does: jobs waiting keep their place and run on the new engine, a running one is cancelled
        (its message says why). A fresh process is also the one sure way to hand back all of the old
        engine's memory. The preview voice has no engine to choose: it keeps running, untouched."""
        if value not in ENGINES:
            raise ValueError(f"unknown engine choice {value!r}")
        self.config.engine = value
        return self._restart_with("engine", value, f"the engine setting changed to {value}")

    def set_mlx_llm(self, value: str) -> bool:
        """Run the MLX LLM in ``value`` (``auto`` or a precision the gate passes) from now on, as
        :meth:`set_engine` does (a restart; PyTorch ignores it); True once a worker with it is ready."""
        if value not in offered_mlx_llm():
            row = next((row for row in MLX_LLM_GATE if row.choice == value), None)
            why = f": {refusal_of_mlx_llm(value)}" if row is not None else ""
            raise ValueError(f"the MLX LLM precision {value!r} is not one the quality gate passes{why}")
        self.config.mlx_llm = value
        return self._restart_with("mlx_llm", value, f"the MLX LLM precision changed to {value}")

    def _restart_with(self, key: str, value: str, reason: str) -> bool:
        engine, current = self.engine, self.current
        if current is None or current.is_preview:
            return engine is not None and engine.status().get("state") == EngineState.READY
        if engine is None:
            return self.restart()
        # The engine spawns its next worker with this; only this choice in it changes.
        engine.config = replace(engine.config, pipeline_kwargs={**engine.config.pipeline_kwargs, key: value})
        try:
            engine.start(wait=True)  # a (re)start under way may have spawned with the old choice: let it end
            return engine.restart(reason=reason)
        except EngineError:  # closed under us by a model switch: that start already has the new choice
            return self.restart()


def starting_engine(flag: str | None, settings: "Settings") -> str:
    """The engine setting the app starts with: ``--engine``, else ``$COSYVOICE_ENGINE``, else the choice the
    page saved last time, else ``auto``. An explicit start-up choice wins over the remembered one; a change
    on the page applies at once and is remembered for the next start without one. ConfigError for a flag
    or variable that names no engine (checked by ``requested_engine``, which names the variable)."""
    if flag is not None or env_value("engine") is not None:
        return requested_engine(flag)
    return resolve("engine", saved=settings.load().get("engine"))


def starting_mlx_llm(settings: "Settings") -> str:
    """The MLX LLM precision setting the app starts with: ``auto`` while ``$COSYVOICE_MLX_LLM`` is set (the
    worker then runs what it names), else the page's saved choice if the gate still passes it, else ``auto``."""
    if os.environ.get(LLM_PRECISION_ENV):
        return "auto"
    saved = settings.load().get("mlx_llm")
    return saved if saved in offered_mlx_llm() else "auto"


# What the page remembers, as it reads it: a wrong-typed value (edited by hand, another version) reads as
# unset, with a note, and never takes a section down (the history's Clear time, the engine menu).
SETTINGS_SHAPE = {
    "notice_acknowledged": Field(("flag",), default=False),
    "engine": Field(("text", "null")),
    "mlx_llm": Field(("text", "null")),
    "history_cleared_at": Field(("number", "null")),
}


class Settings:
    """The page's own remembered choices (whether the first-run notice was acknowledged, the engine menu's
    choice, the history's Clear time), in the cache folder."""

    def __init__(self, cache_dir: Path | None):
        self.path = (Path(cache_dir) if cache_dir else user_cache_dir()) / SETTINGS_FILE

    def load(self) -> dict:
        """Every remembered choice, typed as SETTINGS_SHAPE declares (a missing or unreadable file: none)."""
        record, _ = typed(self._raw(), SETTINGS_SHAPE, str(self.path))
        return record or {}

    def _raw(self):
        try:
            return read_json(self.path)
        except (OSError, ValueError):
            return {}

    def update(self, **values) -> None:
        raw = self._raw()
        data = {**(raw if isinstance(raw, dict) else {}), **values}  # what is not changed stays as written
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(data, indent=1).encode("utf-8"))
        except OSError:  # a read-only cache only means the notice shows (and the engine is Auto) next time
            pass

    @property
    def notice_acknowledged(self) -> bool:
        return bool(self.load().get("notice_acknowledged"))
