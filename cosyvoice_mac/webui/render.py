"""Text and tables the page shows, built from plain data in the page's language (no gradio, no engine)."""

from __future__ import annotations

from cosyvoice_mac.engine.messages import EngineState
from cosyvoice_mac.pipeline.model_dir import RL_LLM_FILE
from cosyvoice_mac.preview import PREVIEW
from cosyvoice_mac.preview.labels import DOWNLOAD_COMMAND
from cosyvoice_mac.sound.prompt_check import PromptCheck
from cosyvoice_mac.webui.strings import Markup
from cosyvoice_mac.webui.strings import text as say

PROMPT_PROBLEM_KEYS = {  # sound.problems.PROBLEMS -> the page's string (its English is the problem's sentence)
    "missing": "prompt_missing",
    "unreadable": "prompt_unreadable",
    "empty": "prompt_empty",
    "no_samples": "prompt_no_samples",
    "not_audio": "prompt_not_audio",
    "invalid_samples": "prompt_invalid_samples",
    "no_decoder": "prompt_no_decoder",
    "low_rate": "prompt_low_rate",
    "odd_rate": "prompt_odd_rate",
    "silent": "prompt_silent",
    "too_short": "prompt_too_short",
    "too_long": "prompt_too_long",
    "not_speech": "prompt_not_speech",
}


def status_line(lang: str, key: str, values: dict) -> str:
    """The line under Generate, then (when ``values`` say so) the streaming summary, the preview label and
    the engine's notes for the user (a fallback, an ignored instruction)."""
    line = say(lang, key, **values)
    if values.get("streamed"):
        line += "  \n" + say(lang, "status_stream_summary", first=values["first"], elapsed=values["elapsed"])
    if values.get("preview"):
        line += "  \n" + preview_line(lang)
    if values.get("notes"):
        line += "  \n" + say(lang, "status_notes", notes=values["notes"])
    return line


def preview_line(lang: str) -> str:
    """The preview voice's label and the command that downloads the real model."""
    return say(lang, "result_preview", label=say(lang, "preview_label"), command=DOWNLOAD_COMMAND)


def render_prompt_check(lang: str, check: PromptCheck) -> str:
    if check.ok:
        return say(lang, "prompt_duration", seconds=check.seconds, speech=check.speech_seconds)
    return say(lang, PROMPT_PROBLEM_KEYS[check.problem], **check.details)


def render_status(lang: str, status: dict) -> str:
    """The status panel's Markdown: model, state, device, memory, queue, speaker cache."""
    unknown = say(lang, "not_known")
    state = status.get("state") or EngineState.STOPPED
    lines = []
    preview = status.get("folder_version") == PREVIEW
    if preview:
        lines.append(say(lang, "status_model_preview", label=say(lang, "preview_label"), command=DOWNLOAD_COMMAND))
    elif status.get("folder"):
        lines.append(
            say(
                lang,
                "status_model",
                name=status["folder"],
                version=status.get("version") or status.get("folder_version"),
                model_id=status.get("model") or unknown,
            )
        )
    if status.get("folder"):
        licence = say(lang, "licence_preview" if preview else "licence_cosyvoice")
        lines.append(say(lang, "status_licence", licence=licence))
    state_key = f"state_{state}"
    lines.append(say(lang, "status_state", state=say(lang, state_key) if state_key in _STATE_KEYS else state))
    if status.get("device"):
        values = {"device": status["device"], "dtype": status.get("dtype") or unknown}
        if status.get("fell_back"):
            lines.append(say(lang, "status_fell_back", reason=status.get("fallback_reason") or unknown, **values))
        else:
            lines.append(say(lang, "status_device", **values))
    if status.get("engine"):
        lines.append(engine_line(lang, status))
    if status.get("mlx_llm"):
        lines.append(mlx_llm_line(lang, status["mlx_llm"]))
    if status.get("vocoder"):
        reason = status.get("vocoder_reason")
        lines.append(
            say(lang, "status_vocoder_torch_because", reason=reason)
            if reason
            else say(lang, "status_vocoder", vocoder=status["vocoder"])
        )
    if status.get("llm_weights") == RL_LLM_FILE:
        lines.append(say(lang, "status_llm_rl", file=RL_LLM_FILE))
    low_memory = status.get("low_memory")
    if low_memory:
        lines.append(
            say(
                lang,
                "status_low_memory_on" if low_memory.get("enabled") else "status_low_memory_off",
                reason=low_memory.get("reason") or unknown,
            )
        )
    precision = status.get("precision") or {}
    reasons = [precision[stage]["reason"] for stage in ("llm", "flow", "vocoder") if stage in precision]
    if reasons:
        lines.append(say(lang, "status_precision", reasons="; ".join(reasons)))
    memory = status.get("memory") or {}
    if memory:
        lines.append(
            say(
                lang,
                "status_memory",
                rss=format_bytes(memory.get("rss_bytes"), lang),
                device_memory=format_bytes(memory.get("device_allocated_bytes"), lang),
            )
        )
    if "queue_length" in status:
        running = status.get("running_together") or (1 if status.get("running") else 0)
        lines.append(say(lang, "status_queue", waiting=status["queue_length"], running=running))
    lines += worker_lines(lang, status.get("workers") or [])
    cache = status.get("cache") or {}
    if cache:
        hits = cache.get("memory_hits", 0) + cache.get("disk_hits", 0)
        lines.append(
            say(
                lang,
                "status_cache",
                rate=status.get("cache_hit_rate") or 0.0,
                hits=hits,
                lookups=hits + cache.get("misses", 0),
            )
        )
    if status.get("last_error"):
        lines.append(say(lang, "status_error", message=status["last_error"]))
    if status.get("library_problem"):
        lines.append(say(lang, "status_voices_problem", message=status["library_problem"]))
    return "  \n".join(lines)


def worker_lines(lang: str, workers: list[dict]) -> list[str]:
    """The cluster's workers (``bash run.sh --cluster``), one line each: machine, device, engine, load; none for the
    one worker process on this computer (the lines above describe it)."""
    if all(worker.get("name") == "local" for worker in workers):
        return []
    unknown = say(lang, "not_known")
    lines = [say(lang, "status_workers", count=sum(not worker.get("lost") for worker in workers))]
    for worker in workers:
        values = {key: worker.get(key) or unknown for key in ("name", "machine", "device", "engine")}
        key = "status_worker_lost" if worker.get("lost") else "status_worker"
        lines.append(say(lang, key, load=worker.get("load", 0), **values))
    return lines


def engine_line(lang: str, status: dict) -> str:
    """Which engine runs, the page's engine setting (when the page chose one) and why that engine runs."""
    names = {"mlx": "MLX", "torch": "PyTorch", "auto": say(lang, "engine_setting_auto")}
    engine, reason, setting = status["engine"], status.get("engine_reason"), status.get("engine_setting")
    values = {"engine": names.get(engine, engine)} | ({"reason": reason} if reason else {})
    if setting:
        key = "status_engine_set_because" if reason else "status_engine_set"
        return say(lang, key, setting=names.get(setting, setting), **values)
    return say(lang, "status_engine_because" if reason else "status_engine", **values)


def mlx_llm_line(lang: str, choice: dict) -> str:
    """Which precision the MLX LLM runs in and why (``MlxLlmChoice.as_dict``): the reference, the low-memory
    mode's pick on a machine of so much RAM, or a named one, with its verdict and figure from the gate."""
    values = {"precision": choice["precision"], "agreement": 100 * (choice.get("agreement") or 1.0)}
    if choice["why"] == "low_memory" and choice.get("agreement") is None:  # no smaller precision passes
        return say(
            lang, "status_mlx_llm_low_memory_reference", ram=round((choice.get("ram_bytes") or 0) / 2**30), **values
        )
    if choice["why"] == "low_memory":
        return say(lang, "status_mlx_llm_low_memory", ram=round((choice.get("ram_bytes") or 0) / 2**30), **values)
    if choice["why"] != "named":
        return say(lang, "status_mlx_llm_reference", **values)
    by = say(lang, "mlx_llm_by_settings") if choice.get("named_by") == "settings" else f"`{choice.get('named_by')}`"
    if not choice.get("passes"):
        verdict = "outside"
    else:
        verdict = "passes" if choice.get("agreement") is not None else "reference"
    return say(lang, f"status_mlx_llm_named_{verdict}", by=Markup(by), **values)


_STATE_KEYS = {f"state_{name}" for name in EngineState.ALL}


def format_bytes(count: int | None, lang: str) -> str:
    """A memory or download figure for the status panel: ``size_text``, or the words for none and unknown."""
    if not count:
        return say(lang, "not_applicable") if count == 0 else say(lang, "not_known")
    return size_text(count)


def size_text(count: float) -> str:
    """``count`` bytes (a size, or bytes per second) as the page writes every size: "1.5 KB", "2.0 GB", "512 B"
    (binary units, one decimal)."""
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{int(count)} B"
