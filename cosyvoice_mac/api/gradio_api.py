"""The page's Gradio API: one documented ``/synthesize`` endpoint and ``/voices``; every other event is
the page's own business and hidden from ``view_api()`` and from the Gradio clients.

``gradio_client`` users call ``client.predict(text=..., voice=..., api_name="/synthesize")`` and get the
saved WAV (downloaded by the client) and the job's facts; the job goes through the same engine queue
as the page's Generate button and the HTTP API.
"""

from __future__ import annotations

import os
from pathlib import Path

import gradio as gr

from cosyvoice_mac.api.auth import ApiAccess
from cosyvoice_mac.api.engine_link import EngineLink, contract_checks
from cosyvoice_mac.api.errors import ApiError
from cosyvoice_mac.api.gradio_inputs import describe, name_input_problems
from cosyvoice_mac.engine.outputs import unsaved_copy
from cosyvoice_mac.paths import temporary_folder
from cosyvoice_mac.request import (
    LUFS_RANGE,
    MAX_INSTRUCT_CHARS,
    MAX_SEED,
    MAX_TEXT_CHARS,
    SAMPLING_FIELDS,
    SPEED_RANGE,
    PostSettings,
    Request,
    Sampling,
)
from cosyvoice_mac.settings import setting

PUBLIC_ENDPOINTS = ("synthesize", "voices")
SYNTHESIZE_TIMEOUT_S = 1800.0


UNDOCUMENTED_EVENTS_ENV = setting("undocumented_events").env
# /synthesize's documentation (Gradio reads one "name: description" line per parameter); its ranges are the
# request contract's own (cosyvoice_mac.request), so they cannot drift from the rule.
_SPEEDS = f"{SPEED_RANGE[0]:g} to {SPEED_RANGE[1]:g}"
_LOUDNESS = f"{LUFS_RANGE[0]:g} to {LUFS_RANGE[1]:g} LUFS"
_SAMPLING = "\n".join(
    f"    {name}: {setting(name).help}, {setting(name).low:g} to {setting(name).high:g}; empty for "
    f"{setting(name).default_words}"
    for name in SAMPLING_FIELDS
)
SYNTHESIZE_DOC = f"""Speak a text in a saved voice; the WAV is saved in outputs/ like the page's results.

Args:
    text: the text to speak, at most {MAX_TEXT_CHARS:,} characters; inline tags [pause 500ms], [speed 1.2] and
        (happy) work, and so does the model's markup such as [breath] and [h][ào]
    voice: a saved voice's name or id; "preview" for the built-in preview voice when no model is installed
    instructions: a style instruction (instruct mode), at most {MAX_INSTRUCT_CHARS:,} characters; empty for none
    prompt_text: what the saved voice's recording says (zero-shot mode); empty to use the saved transcript
    seed: the same seed and text give the same audio; -1 picks one at random (else 0 to {MAX_SEED})
    speed: {_SPEEDS}, 1 is normal
    trim: cut the leading and trailing silence of the result
    loudness_lufs: normalise the result to this loudness ({_LOUDNESS}, e.g. -16); empty for no change
{_SAMPLING}
    style: the saved voice's recording of this style (happy, whisper, ...); empty for its own recording
Returns:
    the WAV file, and its facts: saved (false, with a warning, when outputs/ refused the file: the audio
    comes back all the same), file name, seed, duration_s, sample_rate, mode, model, notes, job_id,
    post (what trim and loudness did)
"""


def attach_public_api(page: gr.Blocks, link: EngineLink, access: ApiAccess, concurrency: int) -> None:
    """Add the public endpoints (and, when the API needs a key, a line saying so) to ``page``; hide the rest."""

    def synthesize(
        text: str,
        voice: str,
        instructions: str,
        prompt_text: str,
        seed: float,
        speed: float,
        trim: bool = False,
        loudness_lufs: float | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: float | None = None,
        repetition_window: float | None = None,
        style: str = "",
    ) -> tuple[str, dict]:
        if trim is not None and not isinstance(trim, bool):  # Gradio's Checkbox passes any value through
            raise gr.Error(f"synthesize: trim must be true or false, got {describe(trim)}", print_exception=False)
        try:
            spoken_in = link.voice(
                link.find_voice((voice or "").strip()),
                transcript=prompt_text or None,
                style=(style or "").strip() or None,
            )
            with contract_checks():
                request = Request.build(
                    text or "",
                    spoken_in,
                    instruct=instructions or None,
                    seed=_seed(seed),
                    speed=_number("speed", speed, 1.0),
                    post=PostSettings(bool(trim), _number("loudness_lufs", loudness_lufs, None)),
                    sampling=Sampling.build(
                        temperature=_number("temperature", temperature, None),
                        top_p=_number("top_p", top_p, None),
                        top_k=_number("top_k", top_k, None),
                        repetition_window=_number("repetition_window", repetition_window, None),
                    ),
                )
            result = link.run(request, "gradio_api", timeout=SYNTHESIZE_TIMEOUT_S)
        except ApiError as error:
            raise gr.Error(error.message, print_exception=False) from None
        if result.output_path:
            path, saved = result.output_path, {"saved": True}
        else:  # outputs/ refused it (a full disk, a read-only folder): the audio comes back all the same
            path = str(unsaved_copy(result, temporary_folder("unsaved")))
            saved = {"saved": False, "warning": f"not saved: {result.output_error}"}
            gr.Warning(saved["warning"])
        facts = {
            "file": Path(result.output_path).name if result.output_path else None,
            **saved,
            "seed": result.seed,
            "duration_s": round(result.duration_s, 3),
            "sample_rate": result.sample_rate,
            "mode": result.mode,
            "model": result.model,
            "notes": list(result.notes),
            "job_id": result.job_id,
            "post": result.post,
        }
        return path, facts

    synthesize.__doc__ = SYNTHESIZE_DOC  # Gradio documents the endpoint and its parameters from it

    def voices() -> list[dict]:
        """The saved voices (id, name, transcript) and, when the preview voice speaks, "preview"."""
        return link.voices()

    with page:
        notice = _key_notice(access)
        if notice:
            gr.Markdown(notice, elem_id="cv-api-notice")
        with gr.Column(visible=False):
            inputs = [
                gr.Textbox(label="text"),
                gr.Textbox(label="voice", value=""),
                gr.Textbox(label="instructions", value=""),
                gr.Textbox(label="prompt_text", value=""),
                gr.Number(label="seed", value=-1),  # no rounding: 1.5 is refused, not made 2
                gr.Number(label="speed", value=1.0),
                gr.Checkbox(label="trim", value=False),
                gr.Number(label="loudness_lufs", value=None),
                *(gr.Number(label=name, value=None) for name in SAMPLING_FIELDS),
                gr.Textbox(label="style", value=""),
            ]
            outputs = [gr.File(label="audio"), gr.JSON(label="metadata")]
            trigger = gr.Button()
        trigger.click(
            synthesize,
            inputs,
            outputs,
            api_name="synthesize",
            api_visibility="public",
            concurrency_id="api-synthesize",
            concurrency_limit=concurrency,
        )
        gr.api(voices, api_name="voices", api_visibility="public", queue=False)
    # The page's own events are private: view_api and /gradio_api/info list the public endpoints only,
    # gradio_client cannot name them, and their REST route is refused (api/server.py). The reliability
    # suite, which drives the page's events from outside as a browser would, asks for them to stay callable
    # but undocumented ($COSYVOICE_UNDOCUMENTED_EVENTS=1, set by tests/reliability/server.py only).
    hidden = "undocumented" if os.environ.get(UNDOCUMENTED_EVENTS_ENV) == "1" else "private"
    for function in page.fns.values():
        if function.api_name not in PUBLIC_ENDPOINTS:
            function.api_visibility = hidden
    name_input_problems(page)


def _key_notice(access: ApiAccess) -> str | None:
    if access.open_to_everyone:
        return (
            f"⚠️ **Open to everyone:** this page listens on `{access.bind_host}` with `--no-auth`, so anyone who "
            "can reach this machine may use the page, the Gradio API and `/v1` without a key. Restart with "
            "`--api-key KEY` to lock it. / ⚠️ **对所有人开放：**此页面以 `--no-auth` 监听 "
            f"`{access.bind_host}`，能访问本机的任何人无需密钥即可使用。用 `--api-key KEY` 重启以加锁。"
        )
    if access.refuses_all:
        return (
            f"**API:** this page listens on `{access.bind_host}` without an API key, so the `/v1` API is off. "
            "Restart with `--api-key KEY` (or set `COSYVOICE_API_KEY`) to turn it on."
        )
    if access.locks_every_door:
        return (
            "**API:** this server is open to the network and locked with its key: `/v1`, the Gradio API and "
            "uploads need the header `Authorization: Bearer <your API key>`."
        )
    if access.key_required:
        return "**API:** `/v1` requests need the header `Authorization: Bearer <your API key>`."
    return None


def _number(field: str, value, default: float | None) -> float | None:
    """``value`` as a float (a number, or text that spells one, as Gradio's Number passes it on); ``default``
    for null. Its range is the request contract's to check."""
    if value is None:
        return default
    if not isinstance(value, bool):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    message = f"synthesize: {field} must be a number, got {describe(value)}"
    raise ApiError(400, message, code="invalid_type", param=field)


def _seed(value: float | None) -> float | None:
    """-1 (the box's default) and null for a random seed; any other value goes to the request contract, whose
    rule (a whole number in range) is the one ``/v1`` and the page apply."""
    if value is None or value == -1:
        return None
    number = None if isinstance(value, bool) else _number("seed", value, None) if _spells_number(value) else None
    if number is None:
        message = f"synthesize: seed must be a whole number, got {describe(value)}"
        raise ApiError(400, message, code="invalid_type", param="seed")
    if number == -1:
        return None
    return int(number) if number.is_integer() else number  # 1.5 goes on, for the contract to refuse


def _spells_number(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True
