"""Issue 45's cases in ``bench/campaign.py``: each escape and breakage of the third campaign, sent to the running
app from outside as it was found (``python bench/campaign.py --only round-three`` runs these alone). A case is
clean when the app now does what the issue asks; each row says what came back. The faults and probes of the
earlier rounds are ``campaign_doors`` and ``campaign_faults``.

Item by item: 1 a wrong-typed sidecar and page setting (History), 2 the key form's redirect (an exposed server
of its own), 3 the voice library's files and other origins' CORS, 4 a dialogue on a nearly full disk, 5 the
voice rules at every door that saves or uses a recording, 6 the Gradio API's unsaved audio (``campaign_faults``'
``outputs_full_gradio``), 7 the file names sent, ``pause_s``, the worker's refusals' field, a seed of 1.5 and
no server path in a "not saved" warning. Items 8-12 are the test suite's and the proofs', not the app's doors.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import uuid
from pathlib import Path

import httpx
import numpy as np
import soundfile
from campaign_faults import _cli, outputs_full_gradio, start_on_a_free_port  # bench/ is on the path

from tests.reliability.server import JOB_S, AppServer
from tests.reliability.test_access import _answer_headers, _request

CONVERT = "v1/audio/voice-conversion"
VOICE = "Campaign"  # the saved voice the cases share
SPOKEN = "A voice for the campaign, read out clearly."
KEY = "campaign-" + uuid.uuid4().hex
LEFT_ON_DISK = 16 << 10  # room for the small files of a result, not its WAV


def _server_paths(app: AppServer) -> list[str]:
    return [str(app.root), str(app.outputs), str(app.cache)]


def _names_no_server_path(app: AppServer, text: str) -> bool:
    return not any(path in text for path in _server_paths(app))


def _error(answer: httpx.Response) -> dict:
    try:
        return answer.json().get("error") or {}
    except ValueError:
        return {}


def _tone(folder: Path) -> Path:
    path = folder / "my tone.wav"
    soundfile.write(path, 0.3 * np.sin(2 * np.pi * 220 * np.arange(72000) / 24000), 24000, subtype="PCM_16")
    return path


def _save_voice(app: AppServer, speech: str) -> bool:
    with open(speech, "rb") as audio:
        answer = httpx.post(
            app.url + "v1/voices",
            data={"name": VOICE, "transcript": SPOKEN},
            files={"audio": ("campaign voice.wav", audio, "audio/wav")},
            timeout=JOB_S * 3,
        )
    return answer.status_code in (201, 409)


# ---------------------------------------------------------------------------------------------- item 1


def history_survives_a_wrong_typed_sidecar_and_page_setting(app: AppServer, **_) -> tuple[bool, str]:
    """``{"file": "zz.wav", "seed": "abc"}`` beside its WAV and ``webui.json`` saying ``"yesterday"``: every
    History field showed "Error" on every page load."""
    app.outputs.mkdir(parents=True, exist_ok=True)
    soundfile.write(app.outputs / "zz.wav", np.zeros(2400, np.float32), 24000)
    (app.outputs / "zz.json").write_text(json.dumps({"file": "zz.wav", "seed": "abc"}))
    page_settings = app.cache / "webui.json"
    kept = page_settings.read_bytes() if page_settings.exists() else None
    page_settings.write_text(json.dumps({"history_cleared_at": "yesterday"}))
    try:
        table, *_ = app.client().predict("en", "", api_name="/history_show")  # what every page load calls
        shown = json.dumps(table)
        return "zz.wav" in shown and "Error" not in shown, f"History lists zz.wav: {'zz.wav' in shown}"
    except Exception as failure:  # the event failed: the page shows "Error" in every field
        return False, f"the History event failed: {str(failure)[:200]}"
    finally:
        (app.outputs / "zz.wav").unlink(missing_ok=True)
        (app.outputs / "zz.json").unlink(missing_ok=True)
        if kept is None:
            page_settings.unlink(missing_ok=True)
        else:
            page_settings.write_bytes(kept)


# ---------------------------------------------------------------------------------------------- item 2

AWAY = ("/%09/evil.example", "/%0A/evil.example", "/%0D/evil.example", "/%5C/evil.example")


def _where_a_browser_goes(location: str) -> str:
    """A Location as browsers read it: tabs and line breaks dropped, backslashes as slashes."""
    return re.sub(r"[\t\n\r]", "", location).replace("\\", "/")


def _leaves_the_site(location: str) -> bool:
    seen = _where_a_browser_goes(location)
    return not seen.startswith("/") or seen.startswith("//")


def key_form_keeps_the_browser_here(locked: AppServer, **_) -> tuple[bool, str]:
    """On an exposed server, ``GET /%09/evil.example`` served the form with ``next`` holding a tab, and the right
    key answered ``303 Location: /<TAB>/evil.example`` (``//evil.example`` to a browser)."""
    away = []
    own = locked.url.rstrip("/")
    with httpx.Client(base_url=own, trust_env=False, timeout=30) as http:
        for path in AWAY:
            form = http.get(path, headers={"Accept": "text/html"})
            target = re.search(r'name="next" value="([^"]*)"', form.text)
            target = target.group(1) if target else "/"
            http.cookies.clear()
            answer = http.post("/key-login", data={"key": KEY, "next": target}, headers={"Origin": own})
            location = answer.headers.get("location", "")
            if answer.status_code != 303 or _leaves_the_site(location):
                away.append(f"{path} -> {answer.status_code} {location!r}")
            raw = http.post("/key-login", data={"key": KEY, "next": "/\t/evil.example"}, headers={"Origin": own})
            if _leaves_the_site(raw.headers.get("location", "")):
                away.append(f"next=/<TAB>/evil.example -> {raw.headers.get('location')!r}")
    return not away, "; ".join(away) or f"{len(AWAY)} paths and a raw next: every answer stays on this server"


# ---------------------------------------------------------------------------------------------- item 3


def voice_library_is_not_served(app: AppServer, speech: str, **_) -> tuple[bool, str]:
    """``/gradio_api/file=<cache>/voices/voices.json`` (every name, transcript and hash), its ``.bak`` and every
    recording answered 200."""
    _save_voice(app, speech)
    httpx.patch(app.url + f"v1/voices/{VOICE}", json={"transcript": SPOKEN}, timeout=30)  # a change: the .bak
    folder = app.cache / "voices"
    files = [path for path in sorted(folder.rglob("*")) if path.is_file()]
    served = []
    for path in files:
        for prefix in ("/gradio_api/file=", "/file="):
            status, body = _request(app, prefix + str(path))
            if status == 200 and path.read_bytes()[:64] in body:
                served.append(f"{prefix}{path.name}")
    names = ", ".join(path.name[:20] for path in files)
    return bool(files) and not served, f"{len(files)} files ({names}); served: {served or 'none'}"


def other_local_pages_get_no_cors_grant(app: AppServer, **_) -> tuple[bool, str]:
    """Gradio reflected any ``http://localhost:*`` / ``http://127.0.0.1:*`` origin with credentials."""
    granted = []
    for origin in (f"http://localhost:{app.port + 1}", f"http://127.0.0.1:{app.port + 1}", "http://localhost:8080"):
        for path in ("/config", "/gradio_api/info"):
            headers = _answer_headers(app, path, {"Origin": origin})
            if headers.get("access-control-allow-origin") or headers.get("access-control-allow-credentials"):
                granted.append(f"{path} to {origin}")
    return not granted, f"granted: {granted or 'none'}"


# ---------------------------------------------------------------------------------------------- item 4


def dialogue_on_a_nearly_full_disk_leaves_no_half_result(app: AppServer, disk, speech: str, **_) -> tuple[bool, str]:
    """A full disk left a dialogue's ``.json`` and ``.timing.json`` in ``outputs/longform/`` without their WAV.
    The disk keeps room for the small files, not the WAV."""
    if not disk.mounted:
        return None, "no tmpfs could be mounted here (not root): not run"
    _save_voice(app, speech)
    disk.fill(leave=LEFT_ON_DISK)
    try:
        body = {"script": f"{VOICE}: Keep all of me together, please.\n{VOICE}: Or none of me."}
        answer = httpx.post(app.url + "v1/longform/dialogue", json=body, timeout=4 * JOB_S)
    finally:
        disk.free()
    events = [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]
    sidecars = [path for path in app.outputs.rglob("*.json") if path.parent.name == "longform"]
    orphans = [path.name for path in sidecars if not path.with_name(_result_name(path) + ".wav").is_file()]
    last = events[-1] if events else {}
    said = str(last.get("warning") or last.get("message"))[:140]
    seen = sidecars_seen(sidecars)
    clean = not orphans and _names_no_server_path(app, answer.text) and answer.status_code in (200, 507)
    detail = f"{answer.status_code}, last event {last.get('type')}, saved {last.get('saved')}: {said}"
    return clean, f"{detail}; files {last.get('files')}; in outputs/longform: {seen}; orphans: {orphans}"


def sidecars_seen(sidecars: list[Path]) -> list[str]:
    return sorted(path.name for path in sidecars)


def _result_name(sidecar: Path) -> str:
    """``talk`` of ``talk.json`` and of ``talk.timing.json``."""
    name = sidecar.name.removesuffix(".json")
    return name.removesuffix(".timing")


# ---------------------------------------------------------------------------------------------- item 5


def voice_rules_hold_at_every_api_door(app: AppServer, speech: str, root: Path, **_) -> list[tuple]:
    """A 100,000-character transcript (POST and PATCH), the name ``preview`` (then shadowed by the built-in
    voice) and a pure tone (create, speak-from-recording, PUT over a good recording) were all taken."""
    _save_voice(app, speech)
    tone = _tone(root)
    index = app.cache / "voices" / "voices.json"
    before = json.loads(index.read_text())["voices"].get(VOICE)

    def refused(answer: httpx.Response, param: str) -> tuple[bool, str]:
        error = _error(answer)
        return answer.status_code == 400 and error.get("param") == param, (
            f"{answer.status_code} {error.get('param')}: {str(error.get('message'))[:120]}"
        )

    def create(data: dict, audio: Path | str) -> httpx.Response:
        with open(audio, "rb") as recording:
            files = {"audio": (Path(audio).name, recording, "audio/wav")}
            return httpx.post(app.url + "v1/voices", data=data, files=files, timeout=JOB_S * 3)

    rows = [
        (
            "POST /v1/voices: a 100,000-character transcript",
            *refused(create({"name": "Wordy", "transcript": "x" * 100_000}, speech), "transcript"),
        ),
        ("POST /v1/voices: the name preview", *refused(create({"name": "preview"}, speech), "name")),
        ("POST /v1/voices: a pure tone", *refused(create({"name": "Tone"}, tone), "audio")),
        (
            "PATCH /v1/voices: a 100,000-character transcript",
            *refused(
                httpx.patch(app.url + f"v1/voices/{VOICE}", json={"transcript": "y" * 100_000}, timeout=30),
                "transcript",
            ),
        ),
    ]
    with open(tone, "rb") as recording:
        put = httpx.put(app.url + f"v1/voices/{VOICE}", files={"audio": (tone.name, recording)}, timeout=JOB_S * 3)
    clean, said = refused(put, "audio")
    kept = json.loads(index.read_text())["voices"].get(VOICE) == before
    rows.append(("PUT /v1/voices: a pure tone over a good recording", clean and kept, f"{said}; kept: {kept}"))
    with open(tone, "rb") as recording:
        spoken = httpx.post(
            app.url + "v1/audio/speech/recording",
            data={"body": json.dumps({"model": "tts-1", "input": "Hello."})},
            files={"prompt_audio": (tone.name, recording)},
            timeout=JOB_S * 3,
        )
    rows.append(("POST /v1/audio/speech/recording: a pure tone", *refused(spoken, "prompt_audio")))
    return rows


# ---------------------------------------------------------------------------------------------- item 7


def _convert(app: AppServer, name: str, audio: bytes) -> httpx.Response:
    files = {"audio": (name, audio, "audio/wav")}
    return httpx.post(
        app.url + CONVERT, data={"voice": "preview", "response_format": "wav"}, files=files, timeout=JOB_S * 3
    )


def conversions_name_the_file_sent(app: AppServer, speech: str, files: dict, root: Path, **_) -> list[tuple]:
    """Conversions through ``/v1`` and the CLI recorded ``source: upload.wav`` and named ``upload.wav`` in refusals."""
    sent = "Interview 3 (take 2).wav"
    answer = _convert(app, sent, Path(speech).read_bytes())
    saved = answer.headers.get("x-cosyvoice-file") or ""
    sidecar = app.outputs / Path(saved).with_suffix(".json").name if saved else None
    source = json.loads(sidecar.read_text()).get("source") if sidecar and sidecar.is_file() else None
    rows = [
        (
            "/v1 conversion records the file sent",
            answer.status_code == 200 and source == sent,
            f"{answer.status_code} source: {source}",
        )
    ]
    silent = _convert(app, "My silence.wav", Path(files["silent"]).read_bytes())
    message = str(_error(silent).get("message"))
    rows.append(
        (
            "/v1 conversion's refusal names the file sent",
            silent.status_code == 400 and "My silence.wav" in message,
            message[:120],
        )
    )

    cwd = root / "round3-cli"
    cwd.mkdir(exist_ok=True)
    named = cwd / "talk take 2.wav"
    shutil.copyfile(speech, named)
    before = {path.name for path in app.outputs.glob("*.json")}
    run = _cli(app, cwd, "convert", str(named), "--voice", "preview", "--out", "converted.wav")
    _, said = run.communicate(timeout=JOB_S * 3)
    made = [app.outputs / name for name in {path.name for path in app.outputs.glob("*.json")} - before]
    sources = [json.loads(path.read_text()).get("source") for path in made]
    rows.append(
        (
            "CLI conversion records the file sent",
            run.returncode == 0 and sources == [named.name],
            f"exit {run.returncode}, sources {sources}: {said.strip()[-100:]}",
        )
    )
    quiet = cwd / "quiet take.wav"
    shutil.copyfile(files["silent"], quiet)
    run = _cli(app, cwd, "convert", str(quiet), "--voice", "preview", "--out", "quiet.wav")
    _, said = run.communicate(timeout=JOB_S * 3)
    rows.append(
        (
            "CLI conversion's refusal names the file sent",
            run.returncode == 2 and "quiet take.wav" in said,
            f"exit {run.returncode}: {said.strip()[-120:]}",
        )
    )
    return rows


def smaller_refusals_name_their_field(app: AppServer, root: Path, speech: str, **_) -> list[tuple]:
    """A dialogue's out-of-range ``pause_s`` failed after the 200 (an SSE error, ``param: null``); worker-side
    refusals carried ``param: null``; the Gradio API took ``seed`` 1.5, which ``/v1`` refuses."""
    _save_voice(app, speech)  # the script's speaker has a voice: only the pause is wrong
    rows = []
    for pause in (99, -1):
        answer = httpx.post(
            app.url + "v1/longform/dialogue", json={"script": f"{VOICE}: Hi.", "pause_s": pause}, timeout=JOB_S
        )
        error = _error(answer)
        rows.append(
            (
                f"dialogue pause_s {pause}",
                answer.status_code == 400 and error.get("param") == "pause_s",
                f"{answer.status_code} {error.get('param')}",
            )
        )
    noise = root / "noise.wav"
    soundfile.write(noise, 0.3 * np.random.default_rng(3).standard_normal(48000).astype(np.float32), 16000)
    answer = _convert(app, noise.name, noise.read_bytes())  # refused by the worker: no speech in it
    error = _error(answer)
    rows.append(
        (
            "a worker-side refusal's param",
            answer.status_code == 400 and error.get("param") == "audio",
            f"{answer.status_code} {error.get('param')}: {str(error.get('message'))[:100]}",
        )
    )
    try:
        app.client().predict(text="Hello.", voice="preview", seed=1.5, api_name="/synthesize")
        said, clean = "taken: a job ran with seed 1.5", False
    except Exception as refusal:
        said = str(refusal)
        clean = "whole number" in said
    rows.append(("the Gradio API's seed 1.5", clean, said[:150]))
    return rows


def unsaved_warnings_name_no_server_path(app: AppServer, disk, **_) -> tuple[bool, str]:
    """ "Not saved" warnings sent the server's absolute outputs path to clients (``/v1``'s warning header)."""
    disk.fill()
    try:
        answer = httpx.post(
            app.url + "v1/audio/speech",
            json={"model": "tts-1", "voice": "preview", "input": "Nowhere to keep this.", "response_format": "wav"},
            timeout=JOB_S,
        )
    finally:
        disk.free()
    warning = answer.headers.get("warning", "")
    clean = answer.status_code == 200 and bool(warning) and _names_no_server_path(app, warning)
    return clean, f"{answer.status_code}, warning: {warning[:160]}"


def run_round_three(app: AppServer, disk, root: Path, files: dict, exposed: bool = True) -> list[dict]:
    """Every case of issue 45 against ``app`` (and, with ``exposed``, a key-locked server of its own)."""

    speech = files["speech"]
    cases = [
        ("1", history_survives_a_wrong_typed_sidecar_and_page_setting),
        ("3", voice_library_is_not_served),
        ("3", other_local_pages_get_no_cors_grant),
        ("4", dialogue_on_a_nearly_full_disk_leaves_no_half_result),
        ("5", voice_rules_hold_at_every_api_door),
        ("6", outputs_full_gradio),
        ("7", conversions_name_the_file_sent),
        ("7", smaller_refusals_name_their_field),
        ("7", unsaved_warnings_name_no_server_path),
    ]
    rows = []
    for item, case in cases:
        app.wait_ready()
        try:
            found = case(app, disk=disk, root=root, files=files, speech=speech)
        except Exception as failure:  # a probe that broke is a finding, not a crash of the campaign
            found = (False, f"the probe failed: {type(failure).__name__}: {failure}"[:300])
        for name, clean, detail in found if isinstance(found, list) else [(case.__name__, *found)]:
            rows.append({"item": item, "case": name, "clean": clean, "detail": detail})
            print(f"round three, item {item}: {rows[-1]}", file=sys.stderr, flush=True)
    if exposed:
        locked = AppServer(root / "locked", ["--host", "0.0.0.0", "--api-key", KEY], {"Authorization": f"Bearer {KEY}"})
        try:
            locked = start_on_a_free_port(locked)
            clean, detail = key_form_keeps_the_browser_here(locked)
        except Exception as failure:
            clean, detail = False, f"the probe failed: {type(failure).__name__}: {failure}"[:300]
        finally:
            locked.stop()
        rows.append({"item": "2", "case": key_form_keeps_the_browser_here.__name__, "clean": clean, "detail": detail})
    return rows  # clean None: not run here (said in its detail)
