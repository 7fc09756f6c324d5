"""What each control does. Plain methods on one object, so tests can call them without a browser.

Every value that arrives from the page is treated as untrusted: model and voice names must be ones we
listed, history files must be this session's own outputs, and no text the user types is read as a path.
Messages are rendered in the page's language; problems with input come back as text for the Markdown
next to the field, never as an exception.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Callable, Iterator

import gradio as gr

from cosyvoice_mac.engine import EngineError
from cosyvoice_mac.engine.host import VOCODER_CHOICES, ModelHost, Settings
from cosyvoice_mac.frontend.glossary import glossary_store
from cosyvoice_mac.mlx import ENGINES
from cosyvoice_mac.mlx.llm_gate import mlx_llm_row
from cosyvoice_mac.mlx.llm_gate import offered as offered_mlx_llm
from cosyvoice_mac.request import MAX_SEED, MAX_TEXT_CHARS, MODES  # noqa: F401 (MODES: re-export)
from cosyvoice_mac.sound.prompt_check import checked_prompt
from cosyvoice_mac.webui.derived_status import StatusCallbacks
from cosyvoice_mac.webui.download_panel import DownloadCallbacks, Downloads
from cosyvoice_mac.webui.generation import GenerateOutputs, Generation
from cosyvoice_mac.webui.history import HistoryBook, HistoryCallbacks
from cosyvoice_mac.webui.longform import LongformCallbacks
from cosyvoice_mac.webui.prompt_trim import PromptTrimCallbacks
from cosyvoice_mac.webui.render import format_bytes, render_prompt_check, render_status
from cosyvoice_mac.webui.sampling_controls import SAMPLING_CONTROLS
from cosyvoice_mac.webui.state import Session
from cosyvoice_mac.webui.strings import text as say
from cosyvoice_mac.webui.take_callbacks import TakeCallbacks
from cosyvoice_mac.webui.transcript_verdict import (
    TranscriptCheckCallbacks,
    TranscriptChecks,
    blocks_generate,
    transcript_blocker,
)
from cosyvoice_mac.webui.voice_cards import UNTRANSCRIBABLE, VoiceCallbacks
from cosyvoice_mac.webui.voice_delete import VoiceDeleteCallbacks
from cosyvoice_mac.webui.voice_files import VoiceFileCallbacks

POLL_S = 0.5
PREPARE_VOICE_TIMEOUT_S = 900.0  # the model may still be loading


class Callbacks(
    StatusCallbacks,
    TakeCallbacks,
    VoiceCallbacks,
    VoiceFileCallbacks,
    VoiceDeleteCallbacks,
    HistoryCallbacks,
    DownloadCallbacks,
    TranscriptCheckCallbacks,
    PromptTrimCallbacks,
):
    """Owns nothing but references: the model host and the generation runner. The voice library belongs to
    the engine; the page reads and changes it only through ``host.engine.voices``."""

    def __init__(self, host: ModelHost, settings: Settings):
        self.host = host
        self.settings = settings
        self.history_book = HistoryBook(host.config.outputs_dir, settings)
        self.downloads = Downloads(host.config.models_dir)
        self.generation = Generation(host, self.history_book)
        self.longform = LongformCallbacks(host, glossary_store(host.config.cache_dir))
        self.transcript_checks = TranscriptChecks()

    # -- voice -----------------------------------------------------------------------------------
    def prompt_message(self, lang: str, audio: str | None) -> str:
        """The line under the prompt: its length, or what is wrong with it."""
        if not audio:
            return ""
        return render_prompt_check(lang, checked_prompt(audio))

    def transcribe(self, lang: str, audio: str | None, voice: str | None) -> Iterator[tuple]:
        """Fill the transcript from the prompt recording (or the picked saved voice's copy of it).

        Yields (transcript, transcript message); the text stays editable. The recogniser runs in its own
        process (``engine.transcriber``), so this process never loads torch.
        """
        path = audio
        if not path and voice:
            try:
                path = self._voices().get(voice).get("audio_path")
            except EngineError as error:
                yield gr.skip(), say(lang, "voice_error", message=error)
                return
        if not path:
            yield gr.skip(), say(lang, "transcribe_needs_audio")
            return
        if audio:
            check = checked_prompt(audio)
            if check.problem in UNTRANSCRIBABLE:
                yield gr.skip(), render_prompt_check(lang, check)
                return
        download: dict = {}

        def progress(done: int, total: int, what: str) -> None:
            download.update(done=done, total=total)

        def message(seconds: float) -> str:
            if download.get("total"):
                return say(
                    lang,
                    "transcribe_download",
                    done=format_bytes(download["done"], lang),
                    total=format_bytes(download["total"], lang),
                )
            return say(lang, "transcribe_progress", seconds=seconds)

        outcome = yield from _in_background(
            lambda: self.host.transcriber.transcribe(path, progress=progress),
            lambda seconds: (gr.skip(), message(seconds)),
        )
        if "error" in outcome:
            yield gr.skip(), say(lang, "transcribe_failed", message=outcome["error"])
        elif not (outcome["value"] or "").strip():
            yield gr.skip(), say(lang, "transcribe_empty")
        else:
            yield outcome["value"].strip(), say(lang, "transcribe_done")

    # -- text ------------------------------------------------------------------------------------
    @staticmethod
    def counter(lang: str, text: str | None) -> str:
        count = len(text or "")
        key = "counter_over" if count > MAX_TEXT_CHARS else "counter"
        return say(lang, key, count=count, limit=MAX_TEXT_CHARS)

    @staticmethod
    def mode_changed(mode: str):
        """Show the transcript (and its Transcribe button) for zero-shot, the instruction fields for instruct,
        neither for cross-lingual."""
        return (
            gr.update(visible=mode == "zero_shot"),
            gr.update(visible=mode == "instruct"),
            gr.update(visible=mode == "instruct"),
            "",
        )

    @staticmethod
    def roll_seed() -> int:
        return random.randint(0, MAX_SEED)

    # -- generate --------------------------------------------------------------------------------
    def generate(
        self,
        lang,
        audio,
        voice,
        transcript,
        text,
        mode,
        instruct,
        seed,
        speed,
        stream,
        session: Session,
        request: gr.Request,
        post_trim=False,
        post_level=False,
        post_target=None,
        *sampling_style_check_fixed,
        check=None,
        seed_fixed=True,
    ) -> Iterator[tuple]:
        """Check the input, queue the job, then report position, each sentence (or streamed chunk), and the
        result. Yields GenerateOutputs (named fields). The post-processing controls come last (off by default),
        then the sampling controls (off: the model's own), then the saved voice's style to speak with (None or
        "": its own recording), then the take check's box (None: as the check setting says; or by name), then
        the page's "Keep this seed" (``seed_fixed``): unless it is ticked, each press speaks with a new seed, shown
        in the seed field so it can be kept or reused. A transcript the check found other words in (``verdict``)
        refuses zero-shot until the user chooses to use what was heard or keep theirs."""
        verdict = self.transcript_checks.latest(getattr(request, "session_hash", None) or "")
        if blocks_generate(verdict, audio, voice, transcript, mode):
            refusal = transcript_blocker(lang, verdict, audio, voice, transcript, mode)
            skip = gr.skip()
            yield GenerateOutputs(*(skip,) * len(GenerateOutputs._fields))._replace(status=refusal, blockers=refusal)
            return
        post = (post_trim, post_level, post_target)
        sampling = sampling_style_check_fixed[:SAMPLING_CONTROLS]
        style, box, fixed = (*sampling_style_check_fixed[SAMPLING_CONTROLS:], None, None, None)[:3]
        check = box if check is None else check
        seed_fixed = seed_fixed if fixed is None else fixed
        if not seed_fixed:
            seed = self.roll_seed()
        updates = self.generation.run(
            lang,
            audio,
            voice,
            transcript,
            text,
            mode,
            instruct,
            seed,
            speed,
            stream,
            session,
            request,
            post,
            sampling,
            style,
            check,
        )
        for index, update in enumerate(updates):
            yield update._replace(seed=seed) if index == 0 and not seed_fixed else update

    def stop(self, request: gr.Request) -> None:
        self.generation.stop(request)

    def session_closed(self, request: gr.Request) -> None:
        """The tab closed: its jobs are cancelled after a short grace period; its transcript verdicts go."""
        self.generation.session_closed(request)
        self.transcript_checks.forget(getattr(request, "session_hash", None) or "")

    def queue_words(self, lang: str, request: gr.Request) -> str:
        return self.generation.queue_words(lang, request)

    def prepare_for_streaming(self, audio: str | None, stream: bool) -> threading.Thread | None:
        """With Stream on, have the worker get a new prompt ready in the background (features and the
        flow prefix), so the first streamed request with it starts as fast as later ones. Best effort:
        whatever is wrong with the prompt is reported by the request that uses it."""
        engine = self.host.engine
        if not (stream and audio and engine is not None) or checked_prompt(audio).problem:
            return None

        def prepare() -> None:
            try:
                engine.prepare_voice(audio, streaming=True, timeout=PREPARE_VOICE_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - an optimisation only; the generation reports real problems
                pass

        worker = threading.Thread(target=prepare, name="prepare-voice", daemon=True)
        worker.start()
        return worker

    @staticmethod
    def stream_toggled(stream: bool):
        """Streaming plays at speed 1.0: the speed slider is set back and locked, and a note says why."""
        if stream:
            return gr.update(value=1.0, interactive=False), gr.update(visible=True)
        return gr.update(interactive=True), gr.update(visible=False)

    # -- model -----------------------------------------------------------------------------------
    def status_panel(self, lang: str) -> str:
        engine = self.host.engine
        problem = engine.voices.problem() if engine is not None else None
        return render_status(lang, {**self.host.status(), "library_problem": problem})

    def model_choices(self, lang: str) -> list[tuple[str, str]]:
        """The model menu: each model folder by name, then the preview voice (when installed)."""
        return [
            (say(lang, "preview_choice") if choice.is_preview else choice.name, choice.name)
            for choice in self.host.choices()
        ]

    def restart(self, lang: str) -> Iterator[tuple[str, str]]:
        """Restart the worker and report progress until it is ready (or failed)."""
        yield from self._while_loading(lang, self.host.restart, "restart_progress", {})

    def switch_model(self, lang: str, name: str) -> Iterator[tuple[str, str]]:
        """Load another model folder, or the preview voice (only a choice the menu listed)."""
        choice = self.host.choice(name)
        if choice is None or (self.host.current is not None and choice.name == self.host.current.name):
            yield gr.skip(), self.status_panel(lang)
            return

        def switch() -> bool:
            self.host.start(choice.name)
            return self.host.engine.start(wait=True)

        yield from self._while_loading(lang, switch, "switch_progress", {"name": choice.name})

    def advanced_applies(self, menus: tuple[bool, bool]) -> bool:
        """Whether the Advanced fold has a menu to show: one this machine offers, for a CosyVoice model."""
        current = self.host.current
        return any(menus) and not (current is not None and current.is_preview)

    def vocoder_choices(self, lang: str) -> list[tuple[str, str]]:
        labels = {
            "torch": "vocoder_torch",
            "coreml:ALL": "vocoder_coreml_all",
            "coreml:CPU_AND_GPU": "vocoder_coreml_cpu_and_gpu",
            "coreml:CPU_AND_NE": "vocoder_coreml_cpu_and_ne",
            "coreml:CPU_ONLY": "vocoder_coreml_cpu_only",
        }
        return [(say(lang, labels[value]), value) for value in VOCODER_CHOICES]

    def switch_vocoder(self, lang: str, value: str) -> Iterator[tuple[str, str]]:
        """Restart the model with the chosen vocoder (only a choice the menu listed)."""
        if value not in VOCODER_CHOICES or value == self.host.config.vocoder:
            yield gr.skip(), self.status_panel(lang)
            return
        yield from self._while_loading(lang, lambda: self.host.set_vocoder(value), "vocoder_progress", {})

    @staticmethod
    def engine_choices(lang: str) -> list[tuple[str, str]]:
        return [(say(lang, f"engine_{value}"), value) for value in ENGINES]

    def switch_engine(self, lang: str, value: str) -> Iterator[tuple[str, str]]:
        """Remember the chosen engine and restart the model on it (only a choice the menu listed); the
        status panel then says which engine runs and why."""
        if value not in ENGINES or value == self.host.config.engine:
            yield gr.skip(), self.status_panel(lang)
            return
        self.settings.update(engine=value)
        current = self.host.current
        if current is None or current.is_preview:
            self.host.set_engine(value)
            yield say(lang, "engine_saved_preview"), self.status_panel(lang)
            return
        yield from self._while_loading(lang, lambda: self.host.set_engine(value), "engine_progress", {})

    @staticmethod
    def mlx_llm_choices(lang: str) -> list[tuple[str, str]]:
        """The MLX LLM precision menu: Auto, then each precision the quality gate passes (read from the
        gate's table, so a precision that fails it is never offered), with its measured agreement."""
        choices = [(say(lang, "mlx_llm_auto"), "auto")]
        for value in offered_mlx_llm()[1:]:
            row = mlx_llm_row(value)
            label = "mlx_llm_reference" if row.agreement is None else "mlx_llm_passing"
            choices.append((say(lang, label, precision=value, agreement=100 * (row.agreement or 1.0)), value))
        return choices

    def switch_mlx_llm(self, lang: str, value: str) -> Iterator[tuple[str, str]]:
        """Remember the MLX LLM precision and restart the model with it (only a choice the menu listed)."""
        if value not in offered_mlx_llm() or value == self.host.config.mlx_llm:
            yield gr.skip(), self.status_panel(lang)
            return
        self.settings.update(mlx_llm=value)
        current = self.host.current
        if current is None or current.is_preview:
            self.host.set_mlx_llm(value)
            yield say(lang, "engine_saved_preview"), self.status_panel(lang)
            return
        yield from self._while_loading(lang, lambda: self.host.set_mlx_llm(value), "mlx_llm_progress", {})

    def _while_loading(self, lang, work, progress_key: str, values: dict):
        outcome = yield from _in_background(
            work, lambda seconds: (say(lang, progress_key, seconds=seconds, **values), self.status_panel(lang))
        )
        status = self.host.status()
        if outcome.get("value"):
            message = say(lang, "restart_done", seconds=outcome["seconds"])
        else:
            reason = outcome.get("error") or status.get("last_error") or say(lang, "not_known")
            message = say(lang, "restart_failed", message=reason)
        yield message, render_status(lang, status)

    # -- page ------------------------------------------------------------------------------------
    def acknowledge_notice(self) -> None:
        """Recorded for the record (the app's settings); the browser shrinks the notice itself."""
        self.settings.update(notice_acknowledged=True)

    def on_load(self, lang: str):
        """Fresh values when a tab opens: saved voices, the status, a seed,
        the model folders now in models/, the MLX LLM precision and engine settings (another tab may have
        changed them)."""
        current = self.host.current.name if self.host.current else None
        models = gr.update(choices=self.model_choices(lang), value=current)
        return (
            gr.update(choices=self.voice_choices(lang)),
            self.status_panel(lang),
            self.roll_seed(),
            models,
            self.host.config.mlx_llm,
            self.host.config.engine,
        )


def _in_background(work: Callable[[], object], tick: Callable[[float], tuple]):
    """Run ``work`` on a thread, yielding ``tick(seconds so far)`` every POLL_S until it ends; then return
    {"value": its result, "seconds": ...} or {"error": "Type: message", "seconds": ...}. Use with yield from."""
    started, outcome = time.monotonic(), {}

    def run():
        try:
            outcome["value"] = work()
        except EngineError as error:  # a message written for the user
            outcome["error"] = str(error)
        except Exception as error:  # shown to the user; the page must keep working
            outcome["error"] = f"{type(error).__name__}: {error}"

    worker = threading.Thread(target=run, name="cosyvoice-ui-task", daemon=True)
    worker.start()
    while worker.is_alive():
        yield tick(time.monotonic() - started)
        worker.join(POLL_S)
    outcome["seconds"] = time.monotonic() - started
    return outcome
