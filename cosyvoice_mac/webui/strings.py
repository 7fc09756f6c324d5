"""Every word the page shows, in English and Chinese: two tables with the same keys (the Chinese page
words live in ``strings_zh.py``, the long-form section's in ``strings_longform.py``).

``text(lang, key, **values)`` formats one entry; it escapes every value that is not itself a formatted
entry (a :class:`Markup`), because the page renders these strings as Markdown with HTML: a voice named
``<img src=x onerror=...>`` or an error quoting ``<script>`` must show as those characters, not as markup.
Keys name the place (``prompt_audio_label``), not
the words, so a translation can change without touching the layout. Language names ("English",
"中文") are shown in their own language and so live in ``LANGUAGES``, outside the tables.
"""

from __future__ import annotations

from cosyvoice_mac.preview.labels import COSYVOICE_LICENSE_NOTE, LICENSE_NOTE, PREVIEW_LABEL
from cosyvoice_mac.webui.strings_convert import EN as CONVERT_EN
from cosyvoice_mac.webui.strings_convert import ZH as CONVERT_ZH
from cosyvoice_mac.webui.strings_longform import EN as LONGFORM_EN
from cosyvoice_mac.webui.strings_longform import ZH as LONGFORM_ZH
from cosyvoice_mac.webui.strings_page import EN as PAGE_PARTS_EN
from cosyvoice_mac.webui.strings_page import ZH as PAGE_PARTS_ZH
from cosyvoice_mac.webui.strings_workspaces import EN as WORKSPACES_EN
from cosyvoice_mac.webui.strings_workspaces import ZH as WORKSPACES_ZH
from cosyvoice_mac.webui.strings_zh import PRESET_LABELS_ZH
from cosyvoice_mac.webui.strings_zh import ZH as PAGE_ZH

LANGUAGES = (("English", "en"), ("中文", "zh"))
DEFAULT_LANGUAGE = "en"

EN: dict[str, str] = {
    # page
    "title": "CosyVoice for Mac",
    "subtitle": "Clone a voice from a few seconds of speech and make it say anything, on this computer.",
    "language_label": "Interface language",
    "notice": "**Only clone voices you have the right to use.** Ask the speaker first and never pass the "
    "result off as their real voice. Every file this app writes names, in its metadata, the software, "
    "model and settings that made it.",
    "notice_ok": "I understand",
    "no_model": "**No model installed yet.** Download one (about 5 GB) with the button under Download a model "
    "(the page switches to it when it is complete), or in a terminal with `bash run.sh download cosyvoice3`.",
    "no_model_preview": "Meanwhile the **preview voice** speaks: an approximate match of the prompt voice, "
    "not real cloning.",
    # voice
    "section_voice": "### 1. Voice",
    "prompt_audio_label": "Prompt audio: 5-15 s of clear speech works best, 3-30 s is taken "
    "(WAV, MP3, FLAC or M4A; upload or record)",
    "prompt_duration": "Prompt: {seconds:.1f} s ({speech:.1f} s of speech).",
    # the prompt's problems: "⚠️ " and sound.problems.SENTENCES, word for word (tests/test_sound_prompt.py)
    "prompt_missing": "⚠️ {name} does not exist, or is no longer on the server (uploads are kept for a while only). "
    "Check the file name or upload it again.",
    "prompt_unreadable": "⚠️ {name} cannot be read ({why}). Pick an audio file you may read, or copy it to this "
    "computer.",
    "prompt_empty": "⚠️ {name} is an empty file (0 bytes). Record or export it again.",
    "prompt_no_samples": "⚠️ {name} contains no audio samples. Record or export it again.",
    "prompt_not_audio": "⚠️ {name} is not an audio file this app can read (expected WAV, FLAC, OGG, MP3 or M4A). "
    "Export the recording as WAV and try again.",
    "prompt_invalid_samples": "⚠️ {name} holds invalid samples (NaN or infinity); export it again as WAV or FLAC.",
    "prompt_no_decoder": "⚠️ {name}: this machine has no decoder for {suffix} files. Install ffmpeg (macOS: brew "
    "install ffmpeg; Debian/Ubuntu: sudo apt-get install ffmpeg) or save the recording as WAV, FLAC or MP3.",
    "prompt_low_rate": "⚠️ {name} is sampled at {rate} Hz; a voice prompt needs at least {limit} Hz (phone-quality "
    "audio lacks the high frequencies the model listens to). Record or export it at 16 kHz or higher.",
    "prompt_odd_rate": "⚠️ {name} uses an unusual sample rate ({rate} Hz) that cannot be converted to {target} Hz "
    "efficiently. Export it at a standard rate such as 16000, 44100 or 48000 Hz.",
    "prompt_silent": "⚠️ {name} is silent (its loudest sample is below -60 dBFS). Check the microphone and record "
    "again.",
    "prompt_too_short": "⚠️ {name} holds only {speech:.1f} s of sound; a voice prompt needs at least {limit:g} s "
    "(5-15 s of clear speech works best). Record a longer sample.",
    "prompt_too_long": "⚠️ {name} has {speech:.1f} s of speech; the model takes at most {limit:g} s. "
    "Cut it to one clear sentence or a few (5-15 s is plenty).",
    "prompt_not_speech": "⚠️ {name} holds no speech (only a tone, noise or music was heard); a voice is taken from "
    "someone speaking. Record or pick a recording of a voice.",
    "prompt_needed": "⚠️ Upload or record a prompt voice, or pick a saved voice.",
    "transcript_label": "Transcript of the prompt audio",
    "transcript_placeholder": "Type exactly what the prompt recording says",
    "transcribe": "Transcribe",
    "transcribe_progress": "⏳ Transcribing the prompt recording… {seconds:.0f} s",
    "transcribe_download": "⏳ Downloading the speech recogniser: {done} of {total}…",
    "transcribe_done": "✅ Filled in from the recording. Check the words and correct them if needed.",
    "transcribe_empty": "⚠️ No words were recognised in the recording. Type the transcript.",
    "transcribe_needs_audio": "⚠️ Upload or record a prompt first, then transcribe it.",
    "transcribe_failed": "⚠️ {message}",
    "transcript_needed": "⚠️ Zero-shot mode needs the transcript of the prompt audio. Type what the "
    "recording says, or choose cross-lingual mode.",
    "voices_label": "Saved voice",
    "voices_info": "Pick a saved voice instead of uploading a prompt.",
    "voices_none": "(none: use the prompt audio)",
    "voice_in_use": "Using the saved voice “{name}”.",
    "voice_name_label": "Name for the current prompt voice",
    "voice_name_placeholder": "e.g. Grandpa reading",
    "save_voice": "Save voice",
    "delete_voice": "Delete voice",
    "voice_saved": "✅ Saved the voice “{name}”.",
    "voice_deleted_undo": "🗑 Deleted the voice “{name}”. Undo brings it back for {seconds} s.",
    "voice_delete_ask": "⚠️ Delete the voice “{name}”? Its recording goes with it (Undo brings it back for a few "
    "seconds).",
    "voice_delete_yes": "Delete it",
    "voice_delete_no": "Keep it",
    "voice_undo": "Undo delete",
    "voice_restored": "✅ The voice “{name}” is back.",
    "voice_undo_gone": "⚠️ Too late to undo: the deleted voice's recording is gone.",
    "voice_undo_taken": "⚠️ A voice named “{name}” was saved meanwhile; rename that one, then press Undo again.",
    "voice_save_needs_audio": "⚠️ Upload or record the prompt audio you want to keep as a voice.",
    "voice_saving": "⏳ Preparing the voice (the model extracts its features)…",
    "voice_save_no_model": "⚠️ No model is running, so the voice cannot be prepared. See the note at the top.",
    "voice_name_needed": "⚠️ Type a name for the voice.",
    "voice_pick_to_delete": "⚠️ Pick a saved voice to delete.",
    "voice_error": "⚠️ {message}",
    # text
    "section_text": "### 2. Text",
    "text_label": "Text to speak",
    "text_placeholder": "Type what the voice should say",
    "counter": "{count} / {limit} characters",
    "counter_over": "⚠️ {count} / {limit} characters: too long, split the text into several requests.",
    "text_empty": "⚠️ There is no text to speak: type a sentence.",
    "markup_help": "Inline control: `[pause 500ms]`, `[speed 1.2]` (to the sentence's end), styles `(happy)` "
    "`(sad)` `(angry)` `(whisper)` `(loud)` `(slow)` `(fast)`; `\\[` and `\\(` keep a bracket as text. "
    "Pronunciation markup (CosyVoice3): pinyin `[h][ào]`, English phones "
    "`[M][AY0][N][UW1][T]`; sounds `[breath]` `[laughter]`; emphasis `<strong>…</strong>`.",
    "mode_label": "Mode",
    "mode_short_zero_shot": "zero-shot",
    "mode_short_cross_lingual": "cross-lingual",
    "mode_short_instruct": "instruct",
    "mode_zero_shot": "Zero-shot: clone with the transcript",
    "mode_cross_lingual": "Cross-lingual: no transcript needed",
    "mode_instruct": "Instruct: style, emotion or dialect",
    "preset_label": "Trained instructions",
    "preset_info": "Each fills the instruction with the words the model was trained on, most of them Chinese: "
    "they work with English text too. Or write your own.",
    "instruct_label": "Instruction",
    "instruct_placeholder": "e.g. 请用四川话表达。 or Please say a sentence in a very soft voice.",
    "instruct_needed": "⚠️ Instruct mode needs an instruction: pick one from the menu or type your own.",
    "seed_label": "Seed",
    "seed_info": "Each Generate picks a new seed and shows it here; the same seed and settings give the same audio.",
    "seed_fixed_label": "Keep this seed",
    "seed_invalid": "⚠️ The seed must be a whole number from 0 to {limit}.",
    "dice_title": "Pick a random seed",
    "speed_label": "Speed",
    "stream_label": "Stream",
    "stream_info": "Play the audio while it is being made.",
    "stream_speed_note": "ℹ️ Speed stays at 1.0 while streaming.",
    # generate
    "generate": "Generate",
    "stop": "Stop",
    "result_label": "Result",
    "status_waiting_model": "⏳ Waiting for the model to load…",
    "status_queued": "⏳ In the queue: position {position}.",
    "status_started": "⏳ Synthesising…",
    "status_progress": "⏳ Sentence {index} of {count}: {text}",
    "status_retry": "⏳ The device failed; retrying on the CPU…",
    "status_streaming": "🔊 Streaming sentence {index} of {count}: {audio:.1f} s of audio so far; first audio "
    "after {first:.1f} s.",
    "status_stream_summary": "🔊 Streamed: first audio after {first:.1f} s, finished after {elapsed:.1f} s.",
    "status_done": "✅ Done: {duration:.1f} s of audio in {seconds:.1f} s, seed {seed}. Saved as {file}.",
    "status_done_unsaved": "✅ Done: {duration:.1f} s of audio, seed {seed}. ⚠️ Not saved: {error}",
    "status_failed": "⚠️ Generation failed: {message}",
    "status_cancelled": "⏹ Stopped.",
    "status_interrupted": "⚠️ Not finished: {message}.",
    "status_not_answering": "⚠️ The model is not answering (no sign of life for {seconds:.0f} s). If it stays "
    "silent it is restarted by itself; waiting jobs keep their place.",
    "status_busy": "⚠️ Busy: the queue is full ({waiting} waiting, the most this app keeps), so yours would be "
    "number {position} in line. Nothing was queued: try again in about {seconds} s.",
    "status_busy_unknown": "⚠️ Busy: the queue is full ({waiting} waiting, the most this app keeps), so yours would "
    "be number {position} in line. Nothing was queued: try again when one has finished.",
    "status_no_model": "⚠️ No model is loaded, so nothing can be generated. See the note at the top.",
    "status_model_error": "⚠️ The model is not available: {message}. Fix the cause, then press Restart model.",
    "status_timeout": "⚠️ No answer from the model for {seconds:g} s. Press Stop, then Restart model.",
    "status_invalid": "⚠️ {message}",
    "status_notes": "ℹ️ {notes}",
    "result_preview": "🔶 **{label}** (`{command}`)",
    # history
    "history_label": "Results (newest first, kept in outputs/)",
    "col_time": "Time",
    "col_text": "Text",
    "col_mode": "Mode",
    "col_voice": "Voice",
    "col_seed": "Seed",
    "col_speed": "Speed",
    "col_duration": "Seconds",
    "col_model": "Model",
    "col_file": "File",
    "history_prompt_voice": "uploaded prompt",
    "history_pick_label": "Pick a result to play, download or reuse",
    "history_audio_label": "Earlier result",
    # model status
    "section_model": "### Model",
    "model_label": "Model",
    "model_info": "Model folders found in models/, or the preview voice",
    "preview_choice": "Preview voice (approximate, no download)",
    "preview_label": PREVIEW_LABEL,
    "licence_heading": "Licences",
    "licence_cosyvoice": COSYVOICE_LICENSE_NOTE,
    "licence_preview": LICENSE_NOTE,
    "restart": "Restart model",
    "restart_progress": "⏳ Restarting the model… {seconds:.0f} s",
    "switch_progress": "⏳ Loading {name}… {seconds:.0f} s",
    "restart_done": "✅ The model is ready ({seconds:.0f} s).",
    "restart_failed": "⚠️ The model did not start: {message}",
    "status_model": "**Model:** {name} ({version}, {model_id})",
    "status_model_preview": "**Model:** 🔶 {label} (`{command}`)",
    "status_licence": "**Licence:** {licence}",
    "status_state": "**State:** {state}",
    "status_device": "**Device:** {device}, {dtype}",
    "status_vocoder": "**Vocoder:** {vocoder}",
    "status_engine": "**Engine:** {engine}",
    "status_engine_because": "**Engine:** {engine} ({reason})",
    "status_engine_set": "**Engine:** {engine} (setting: {setting})",
    "status_engine_set_because": "**Engine:** {engine} (setting: {setting}; {reason})",
    "status_precision": "**Precision:** {reasons}",
    "status_vocoder_torch_because": "**Vocoder:** PyTorch (Core ML is not used: {reason})",
    "vocoder_label": "Vocoder",
    "vocoder_info": "Core ML runs the vocoder on the Mac's GPU or Neural Engine (macOS only; converted on first use)",
    "vocoder_torch": "PyTorch (same device as the model)",
    "vocoder_coreml_all": "Core ML: all compute units",
    "vocoder_coreml_cpu_and_gpu": "Core ML: CPU and GPU",
    "vocoder_coreml_cpu_and_ne": "Core ML: CPU and Neural Engine",
    "vocoder_coreml_cpu_only": "Core ML: CPU only",
    "vocoder_progress": "⏳ Restarting with the new vocoder… {seconds:.0f} s",
    "engine_label": "Engine",
    "engine_info": "What runs the model (CosyVoice2 or CosyVoice3): MLX (Apple's framework, the fast path on "
    "Apple Silicon) or PyTorch. A change restarts the model (a job running now is cancelled; waiting ones keep "
    "their place) and is remembered",
    "engine_auto": "Auto (MLX on Apple Silicon, else PyTorch)",
    "engine_mlx": "MLX",
    "engine_torch": "PyTorch",
    "engine_setting_auto": "Auto",
    "engine_progress": "⏳ Restarting on the chosen engine… {seconds:.0f} s",
    "engine_saved_preview": "The engine choice is saved; it applies to CosyVoice models (the preview voice has none).",
    "mlx_llm_label": "MLX LLM precision",
    "mlx_llm_info": "How the MLX engine stores the speech LLM. Only precisions that pass the quality gate (their "
    "top-25 candidates equal fp32's on at least 95 % of steps) are offered. A change restarts the model",
    "mlx_llm_auto": "Auto (fp32; on a low-memory machine the smallest that passes the gate)",
    "mlx_llm_reference": "{precision} (the reference)",
    "mlx_llm_passing": "{precision} (passes the gate at {agreement:.1f} %)",
    "mlx_llm_progress": "⏳ Restarting with the new MLX LLM precision… {seconds:.0f} s",
    "status_mlx_llm_reference": "**MLX LLM:** {precision}, the reference precision",
    "status_mlx_llm_low_memory": "**MLX LLM:** {precision}: {ram} GB of RAM (low-memory mode), passes the quality "
    "gate at {agreement:.1f} %, the smallest precision that does",
    "status_mlx_llm_low_memory_reference": "**MLX LLM:** {precision}: {ram} GB of RAM (low-memory mode), the "
    "reference precision: no smaller one passes the quality gate",
    "status_mlx_llm_named_passes": "**MLX LLM:** {precision}: chosen in {by}, passes the quality gate at "
    "{agreement:.1f} %",
    "status_mlx_llm_named_reference": "**MLX LLM:** {precision}: chosen in {by}, the reference precision",
    "status_mlx_llm_named_outside": "**MLX LLM:** {precision}: chosen in {by}, outside the quality gate "
    "(top-25 candidates equal fp32's on {agreement:.1f} % of steps; it needs 95 %)",
    "mlx_llm_by_settings": "the engine settings",
    "status_fell_back": "**Device:** {device}, {dtype}, fell back to the CPU: {reason}",
    "status_memory": "**Memory:** process {rss}, device {device_memory}",
    "status_llm_rl": "**LLM:** `{file}`, the reinforcement-tuned weights you downloaded with `--rl` "
    "(`COSYVOICE_LLM=base` uses `llm.pt`)",
    "status_low_memory_on": "**Low-memory mode:** on ({reason}; `COSYVOICE_LOW_MEMORY=0` turns it off)",
    "status_low_memory_off": "**Low-memory mode:** off ({reason}; `COSYVOICE_LOW_MEMORY=1` turns it on)",
    "status_queue": "**Queue:** {waiting} waiting, {running} running",
    "status_workers": "**Workers:** {count} on the Ray cluster, each running its machine's own engine",
    "status_worker": "- {name} on {machine}: {device}, {engine}, {load} running",
    "status_worker_lost": "- {name} on {machine}: lost (its jobs went to the others)",
    "status_cache": "**Speaker cache hit rate:** {rate:.0%} ({hits} of {lookups})",
    "status_error": "**Last error:** {message}",
    "status_voices_problem": "**Saved voices:** ⚠️ {message}.",
    "state_ready": "ready",
    "state_starting": "loading",
    "state_restarting": "restarting",
    "state_error": "failed to start",
    "state_stopped": "stopped",
    "state_closed": "shut down",
    "state_unresponsive": "⚠️ the model is not answering (it is restarted if it stays silent)",
    "not_known": "not known yet",
    "not_applicable": "none",
}

EN.update(LONGFORM_EN)
EN.update(PAGE_PARTS_EN)
EN.update(CONVERT_EN)
EN.update(WORKSPACES_EN)
ZH: dict[str, str] = {**PAGE_ZH, **LONGFORM_ZH, **PAGE_PARTS_ZH, **CONVERT_ZH, **WORKSPACES_ZH}
TABLES = {"en": EN, "zh": ZH}
# Characters Markdown or HTML would read as markup; each becomes its numeric character reference, which
# renders as the character itself.
_MARKUP_CHARACTERS = {ord(char): f"&#{ord(char)};" for char in "&<>\\`*_[]|~#!"}


class Markup(str):
    """Text that is already Markdown of ours (an entry of the tables): ``text`` does not escape it again."""


def escape(value: object) -> str:
    """``value`` as text that Markdown and HTML show literally (numbers and Markup pass unchanged)."""
    if isinstance(value, (Markup, int, float)):
        return value
    return str(value).translate(_MARKUP_CHARACTERS)


def language(lang: str | None) -> str:
    """``lang`` if it names a table, else the default (a value from the browser is never trusted)."""
    return lang if lang in TABLES else DEFAULT_LANGUAGE


def text(lang: str | None, key: str, **values) -> str:
    """The entry ``key`` in ``lang`` (English when ``lang`` is unknown), formatted with ``values``."""
    entry = TABLES[language(lang)][key]
    return Markup(entry.format(**{name: escape(value) for name, value in values.items()}) if values else entry)


def plural(lang: str | None, key: str, count: int, **values) -> str:
    """The entry ``key`` for ``count`` things (``{count}`` filled in): ``<key>_one`` when the language says
    "1 thing" differently from "2 things" (English), else ``key`` (Chinese has one form, in both keys)."""
    chosen = f"{key}_one" if count == 1 and f"{key}_one" in TABLES[language(lang)] else key
    return text(lang, chosen, count=count, **values)


def preset_label(lang: str | None, english_label: str) -> str:
    """The menu label of one trained instruction."""
    return PRESET_LABELS_ZH[english_label] if language(lang) == "zh" else english_label


def preset_choice(lang: str | None, english_label: str, instruction: str) -> str:
    """A trained instruction as its menu shows it: in English with the words it puts in the box (they are the
    model's, often Chinese, so an English name alone would surprise); in Chinese its name alone."""
    label = preset_label(lang, english_label)
    return label if language(lang) == "zh" or instruction.isascii() else f"{label} · {instruction}"
