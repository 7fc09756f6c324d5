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
from pathlib import Path
from typing import Callable, Iterator

import gradio as gr

from cosyvoice_mac.engine import EngineError, VoiceLibrary
from cosyvoice_mac.engine.host import VOCODER_CHOICES, ModelHost, Settings
from cosyvoice_mac.frontend.glossary import glossary_store
from cosyvoice_mac.mlx import ENGINES
from cosyvoice_mac.request import MAX_SEED, MAX_TEXT_CHARS, MODES  # noqa: F401 (MODES: re-export)
from cosyvoice_mac.sound.prompt_check import checked_prompt
from cosyvoice_mac.webui.generation import Generation
from cosyvoice_mac.webui.longform import LongformCallbacks
from cosyvoice_mac.webui.render import PROMPT_PROBLEM_KEYS, format_bytes, render_prompt_check, render_status
from cosyvoice_mac.webui.state import Session, is_inside
from cosyvoice_mac.webui.strings import text as say

POLL_S = 0.5
SAVE_VOICE_TIMEOUT_S = 900.0  # covers a model that is still loading when Save is pressed
PREPARE_VOICE_TIMEOUT_S = 900.0  # the model may still be loading
UNTRANSCRIBABLE = (
    "missing",
    "unreadable",
    "empty",
    "no_samples",
    "not_audio",
    "invalid_samples",
    "no_decoder",
    "silent",
)


class Callbacks:
    """Owns nothing but references: the model host and the generation runner. The voice library belongs to
    the engine; the page reads and changes it only through ``host.engine.voices``."""

    def __init__(self, host: ModelHost, settings: Settings):
        self.host = host
        self.settings = settings
        self.generation = Generation(host)
        self.longform = LongformCallbacks(host, glossary_store(host.config.cache_dir))

    # -- voice -----------------------------------------------------------------------------------
    def prompt_message(self, lang: str, audio: str | None) -> str:
        """The line under the prompt: its length, or what is wrong with it."""
        if not audio:
            return ""
        return render_prompt_check(lang, checked_prompt(audio))

    def prompt_uploaded(self, lang: str, audio: str | None):
        """A new upload or recording replaces any saved voice that was picked; a file that is not audio
        at all is taken out again (the message stays), so the upload area is back for the next try."""
        if not audio:
            return "", "", gr.skip()
        check = checked_prompt(audio)
        unusable = check.problem in UNTRANSCRIBABLE[:-1]  # all but "silent": those files hold no sound at all
        return render_prompt_check(lang, check), "", None if unusable else gr.skip()

    @property
    def voices(self) -> VoiceLibrary:
        """The engine's voice library (see ``_voices``)."""
        return self._voices()

    def _voices(self) -> VoiceLibrary:
        """The engine's voice library; EngineError when no model (so no engine) is running."""
        engine = self.host.engine
        if engine is None:
            raise EngineError("no model is running, so saved voices cannot be used; see the note at the top")
        return engine.voices

    def voice_choices(self, lang: str) -> list[tuple[str, str]]:
        try:
            names = [entry["name"] for entry in self._voices().list()]
        except EngineError:  # VoiceError included: an unreadable list shows as none
            names = []
        return [(say(lang, "voices_none"), "")] + [(name, name) for name in names]

    def voice_picked(self, lang: str, name: str, transcript: str):
        """Picking a saved voice clears the upload and fills the transcript the voice was saved with."""
        if not name:
            return gr.skip(), "", gr.skip()
        try:
            entry = self._voices().get(name)
        except EngineError as error:
            return gr.skip(), say(lang, "voice_error", message=error), gr.skip()
        return None, say(lang, "voice_in_use", name=name), entry.get("transcript") or transcript

    def save_voice(self, lang: str, name: str, audio: str | None, transcript: str | None) -> Iterator[tuple]:
        """Keep the uploaded or recorded prompt as a named voice: the worker prepares its features now, so
        no generation is needed first. Yields (voice message, voices menu)."""
        name = (name or "").strip()
        if not name:
            yield say(lang, "voice_name_needed"), gr.skip()
            return
        if not audio:
            yield say(lang, "voice_save_needs_audio"), gr.skip()
            return
        check = checked_prompt(audio)
        if not check.ok:
            yield say(lang, PROMPT_PROBLEM_KEYS[check.problem], **check.details), gr.skip()
            return
        engine = self.host.engine
        if engine is None:
            yield say(lang, "voice_save_no_model"), gr.skip()
            return
        yield say(lang, "voice_saving"), gr.skip()
        try:
            engine.save_voice_from_audio(name, audio, transcript, timeout=SAVE_VOICE_TIMEOUT_S)
        except (EngineError, TimeoutError, OSError) as error:  # OSError: the voices folder refused the copy
            yield say(lang, "voice_error", message=error), gr.skip()
            return
        yield say(lang, "voice_saved", name=name), gr.update(choices=self.voice_choices(lang))

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

    def delete_voice(self, lang: str, name: str):
        if not name:
            return say(lang, "voice_pick_to_delete"), gr.skip()
        try:
            self._voices().delete(name)
        except EngineError as error:
            return say(lang, "voice_error", message=error), gr.skip()
        return say(lang, "voice_deleted", name=name), gr.update(choices=self.voice_choices(lang), value="")

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
    ) -> Iterator[tuple]:
        """Check the input, queue the job, then report position, each sentence (or streamed chunk), and the
        result. Yields GenerateOutputs (named fields). The post-processing controls come last (off by default).
        """
        post = (post_trim, post_level, post_target)
        yield from self.generation.run(
            lang, audio, voice, transcript, text, mode, instruct, seed, speed, stream, session, request, post
        )

    def stop(self, request: gr.Request) -> None:
        self.generation.stop(request)

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

    # -- history ---------------------------------------------------------------------------------
    def history_picked(self, file_name: str | None, session: Session):
        """The chosen earlier output, if it is this session's and still in outputs/."""
        entry = session.find(file_name) if isinstance(session, Session) else None
        if entry is None or not is_inside(entry.path, self.host.config.outputs_dir) or not Path(entry.path).is_file():
            return None
        return entry.path

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

    def vocoder_choices(self, lang: str) -> list[tuple[str, str]]:
        labels = {
            "torch": "vocoder_torch",
            "coreml:ALL": "vocoder_coreml_all",
            "coreml:CPU_AND_GPU": "vocoder_coreml_cpu_and_gpu",
            "coreml:CPU_AND_NE": "vocoder_coreml_cpu_and_ne",
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
    def acknowledge_notice(self):
        self.settings.update(notice_acknowledged=True)
        return gr.update(visible=False)

    def on_load(self, lang: str):
        """Fresh values when a tab opens: saved voices, the status, whether the notice still shows, a seed,
        the model folders now in models/, the engine setting (another tab may have changed it)."""
        current = self.host.current.name if self.host.current else None
        models = gr.update(choices=self.model_choices(lang), value=current)
        return (
            gr.update(choices=self.voice_choices(lang)),
            self.status_panel(lang),
            gr.update(visible=not self.settings.notice_acknowledged),
            self.roll_seed(),
            models,
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
