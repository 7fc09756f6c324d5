"""The faults and the security probes of ``bench/campaign.py``. A fault is clean when its door names it as the
server's fault (5xx with Retry-After, an SSE ``error`` event, CLI exit 75 or 73, the page's status) or says
what was damaged, nothing is lost or half-written, and the app answers a good request afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import soundfile

from tests.reliability.server import JOB_S, REPO_ROOT, AppServer
from tests.reliability.test_access import _file_paths, _request
from tests.reliability.test_damaged_state import DAMAGED_BACKUP, DAMAGED_GLOSSARY, DAMAGED_INDEX, _sse
from tests.reliability.test_faults import LONG_TEXT, _body, _events, _kill_worker, _wait_running

SPEECH = "v1/audio/speech"
EVIL = ("http://evil.example", "null", "http://127.0.0.1.evil.example")


def start_on_a_free_port(app: AppServer, disk=None, tries: int = 3) -> AppServer:
    """``app`` started; on a machine others share, the free port it picked may be taken before it listens: then
    again on another."""
    for attempt in range(tries):
        try:
            return app.start(disk)
        except RuntimeError as failure:
            if "the port is taken" not in str(failure) or attempt == tries - 1:
                raise
            app = AppServer(app.root, app.extra_args, app.headers)
    raise AssertionError("unreachable")


def _good_job_works(app: AppServer) -> bool:
    app.wait_ready()
    return httpx.post(app.url + SPEECH, json=_body("After the fault."), timeout=JOB_S).status_code == 200


def _in_thread(call) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    return thread, out


def _cli(app: AppServer, cwd: Path, *arguments: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(REPO_ROOT), "NO_PROXY": "127.0.0.1"}
    command = [sys.executable, "-m", "cosyvoice_mac", *arguments, "--server", app.url]
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_mid_v1(app, **_):
    thread, out = _in_thread(lambda: httpx.post(app.url + SPEECH, json=_body(LONG_TEXT), timeout=2 * JOB_S))
    _wait_running(app)
    _kill_worker(app)
    thread.join(2 * JOB_S)
    error = out[0].json().get("error", {})
    return out[0].status_code == 503 and error.get("type") == "server_error" and "retry-after" in out[0].headers, (
        f"{out[0].status_code} {error.get('code')}"
    )


def kill_mid_sse(app, **_):
    lines, killed = [], False
    with httpx.stream(
        "POST", app.url + SPEECH, json=_body(LONG_TEXT, stream=True, stream_format="sse"), timeout=2 * JOB_S
    ) as answer:
        for line in answer.iter_lines():
            lines.append(line)
            if not killed and _events(lines):
                _kill_worker(app)
                killed = True
    last = _events(lines)[-1] if _events(lines) else {}
    return last.get("type") == "error" and last.get("retry_after", 0) > 0, str(last)[:200]


def kill_mid_wav_stream(app, **_):
    logged, received = len(app.log()), bytearray()
    try:
        with httpx.stream("POST", app.url + SPEECH, json=_body(LONG_TEXT, stream=True), timeout=2 * JOB_S) as answer:
            for chunk in answer.iter_bytes():
                if not received:
                    _kill_worker(app)
                received += chunk
        ended = "ended as if whole"
    except httpx.RemoteProtocolError:
        ended = "cut detectably"
    app.wait_ready()
    since = app.log()[logged:]
    return ended == "cut detectably" and "Traceback" not in since, f"{ended}; traceback logged: {'Traceback' in since}"


def kill_mid_cli(app, cwd, **_):
    run = _cli(app, cwd, "synth", "--voice", "preview", "--text", LONG_TEXT, "--out", "o.wav")
    _wait_running(app)
    _kill_worker(app)
    _, said = run.communicate(timeout=2 * JOB_S)
    return run.returncode == 75 and "Traceback" not in said, f"exit {run.returncode}: {said.strip()[-150:]}"


def kill_mid_page(app, **_):
    client = app.client()
    job = client.submit(LONG_TEXT, "preview", "", "", 1, 1.0, api_name="/synthesize")
    _wait_running(app)
    _kill_worker(app)
    try:
        job.result(timeout=2 * JOB_S)
        return False, "the Gradio API answered a result for a killed job"
    except Exception as refusal:  # gradio_client's AppError carries the app's words
        said = str(refusal)
    return "Traceback" not in said and len(said) > 10, said[:200]


def sigstop_worker(app, **_):
    thread, out = _in_thread(lambda: httpx.post(app.url + SPEECH, json=_body(LONG_TEXT), timeout=4 * JOB_S))
    _wait_running(app)
    pid = app.worker_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        thread.join(4 * JOB_S)
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    answer = out[0] if out else None
    app.wait_ready()
    replaced = app.worker_pid() != pid
    return bool(answer is not None and answer.status_code >= 500 and replaced), (
        f"{answer.status_code if answer else 'no answer'}; worker replaced: {replaced}"
    )


def outputs_full_v1(app, disk, **_):
    disk.fill()
    try:
        answer = httpx.post(app.url + SPEECH, json=_body("Nowhere to keep this."), timeout=JOB_S)
    finally:
        disk.free()
    saved = answer.headers.get("x-cosyvoice-saved")
    return answer.status_code == 200 and saved == "false" and "warning" in answer.headers, f"saved: {saved}"


def outputs_full_gradio(app, disk, **_):
    """The audio comes back all the same, as from /v1, the CLI and long form, with a warning that names no server
    path (issue 45 item 6: it answered "the audio is still available" and sent no file)."""
    disk.fill()
    try:
        path, facts = app.client().predict("Not kept.", "preview", "", "", 1, 1.0, api_name="/synthesize")
    except Exception as refusal:
        return False, f"no audio: {str(refusal)[:200]}"
    finally:
        disk.free()
    samples, _ = soundfile.read(path, dtype="float32")
    warning = str(facts.get("warning"))
    clean = facts.get("saved") is False and samples.size > 0 and "save" in warning and str(app.root) not in warning
    return clean, f"{samples.size} samples, saved {facts.get('saved')}: {warning[:160]}"


def outputs_full_cli(app, disk, cwd, **_):
    disk.fill()
    try:
        run = _cli(app, cwd, "synth", "--voice", "preview", "--text", "Keep me here.", "--out", "full.wav")
        _, said = run.communicate(timeout=JOB_S)
    finally:
        disk.free()
    return run.returncode == 73 and (cwd / "full.wav").is_file(), f"exit {run.returncode}: {said.strip()[-150:]}"


def outputs_read_only(app, disk, cwd, **_):
    if not disk.mounted:
        return None, "no tmpfs could be mounted here (not root): not run"
    subprocess.run(["mount", "-o", "remount,ro", str(disk.folder)], check=True, timeout=20)
    try:
        answer = httpx.post(app.url + SPEECH, json=_body("Read only."), timeout=JOB_S)
        run = _cli(app, cwd, "synth", "--voice", "preview", "--text", "Read only.", "--out", "ro.wav")
        _, said = run.communicate(timeout=JOB_S)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(disk.folder)], check=True, timeout=20)
    saved = answer.headers.get("x-cosyvoice-saved")
    clean = saved == "false" and run.returncode == 73 and (cwd / "ro.wav").is_file()
    return clean, f"/v1 saved: {saved}; CLI exit {run.returncode}"


def client_leaves(app, **_):
    """A /v1 client that leaves mid-job: its job is cancelled (nothing keeps running for nobody)."""
    thread, _ = _in_thread(lambda: _leave_early(app))
    _wait_running(app)
    thread.join(JOB_S)
    client, deadline, status = app.client(), time.monotonic() + JOB_S, ""
    while time.monotonic() < deadline:
        status = app.status(client)
        if "1 running" not in status:
            return True, "the job ended soon after its client left"
        time.sleep(0.5)
    return False, "the job ran on for a minute after its client left"


def _leave_early(app) -> None:
    try:  # the whole answer comes when the job is done: give up waiting for it while it runs
        httpx.post(app.url + SPEECH, json=_body(LONG_TEXT), timeout=httpx.Timeout(JOB_S, read=4.0))
    except httpx.ReadTimeout:
        pass


def flood(app, **_):
    def one(index):
        return httpx.post(
            app.url + SPEECH, json=_body(f"A flood request, number {index}. It has two sentences."), timeout=4 * JOB_S
        )

    with ThreadPoolExecutor(max_workers=12) as pool:
        answers = list(pool.map(one, range(12)))
    refused = [answer for answer in answers if answer.status_code != 200]
    clean = all(answer.status_code in (429, 503) and "retry-after" in answer.headers for answer in refused)
    return clean and len(answers) == 12, f"{len(answers) - len(refused)} done, {len(refused)} refused with Retry-After"


def dc_prompt(app, cwd, **_):
    dc = cwd / "dc.wav"
    soundfile.write(dc, np.full(24000 * 4, 0.5, np.float32), 24000, subtype="PCM_16")
    body = json.dumps({"model": "tts-1", "input": "Hello there.", "response_format": "wav"})
    answer = httpx.post(
        app.url + "v1/audio/speech/recording",
        data={"body": body},
        files={"prompt_audio": ("dc.wav", dc.read_bytes(), "audio/wav")},
        timeout=JOB_S,
    )
    error = answer.json().get("error", {}) if answer.status_code >= 400 else {}
    return answer.status_code == 400 and error.get("param") == "prompt_audio", f"{answer.status_code} {error}"


def temp_folder_emptied(app, **_):
    for path in sorted(app.temp_root.rglob("*"), reverse=True):
        try:
            path.unlink() if path.is_file() else None
        except OSError:
            pass
    answer = httpx.post(app.url + SPEECH, json=_body("The temp folder was emptied."), timeout=JOB_S)
    return answer.status_code == 200, f"{answer.status_code}"


def damaged_state(root: Path, **_):
    """An app started over a damaged voice list, its damaged backup and a damaged glossary: two faults."""
    voices = root / "damaged" / "cache" / "voices"
    voices.mkdir(parents=True)
    (voices / "voices.json").write_bytes(DAMAGED_INDEX)
    (voices / "voices.json.bak").write_bytes(DAMAGED_BACKUP)
    (root / "damaged" / "cache" / "glossary.json").write_bytes(DAMAGED_GLOSSARY)
    app = AppServer(root / "damaged").start()
    try:
        log = app.log()
        kept = len(list(voices.glob("*.unreadable-*"))) == 2
        said_voices = "could not be read" in log and "restored" not in log
        batch = httpx.post(
            app.url + "v1/longform/batch",
            files={"file": ("lines.txt", b"One line, spoken without the glossary.\n", "text/plain")},
            data={"name": "without-glossary"},
            timeout=2 * JOB_S,
        )
        notes = [event for event in _sse(batch) if event.get("type") == "note"] if batch.status_code == 200 else []
        said_glossary = "glossary.json cannot be read" in log and any("glossary" in note["message"] for note in notes)
    finally:
        app.stop()
    return [
        ("damaged voices.json and .bak", kept and said_voices, f"copies kept: {kept}; said: {said_voices}"),
        ("damaged glossary.json", batch.status_code == 200 and said_glossary, f"batch {batch.status_code}"),
    ]


FAULTS = [
    kill_mid_v1,
    kill_mid_sse,
    kill_mid_wav_stream,
    kill_mid_cli,
    kill_mid_page,
    sigstop_worker,
    outputs_full_v1,
    outputs_full_gradio,
    outputs_full_cli,
    outputs_read_only,
    client_leaves,
    flood,
    dc_prompt,
    temp_folder_emptied,
]


def run_faults(app: AppServer, disk, root: Path, files) -> list[dict]:
    rows = []
    cwd = root / "faults"
    cwd.mkdir(exist_ok=True)
    for fault in FAULTS:
        app.wait_ready()
        try:
            clean, detail = fault(app, disk=disk, cwd=cwd)
        except Exception as failure:  # a probe that broke is a finding, not a crash of the campaign
            clean, detail = False, f"the probe failed: {type(failure).__name__}: {failure}"[:300]
        if clean is not None:
            recovered = _good_job_works(app)
            rows.append(
                {"fault": fault.__name__, "clean": bool(clean and recovered), "detail": detail, "recovered": recovered}
            )
        else:
            rows.append({"fault": fault.__name__, "clean": None, "detail": detail})
        print(f"fault {fault.__name__}: {rows[-1]}", file=sys.stderr, flush=True)
    for name, clean, detail in damaged_state(root):
        rows.append({"fault": name, "clean": clean, "detail": detail})
    return rows  # clean None: not run here (said in its detail)


def security(app: AppServer, root: Path) -> dict:
    """Cross-origin changes (and a rebinding Host) refused; nothing outside outputs/ and the temp folder read."""
    changes = [
        ("POST", "/gradio_api/upload"),
        ("POST", "/gradio_api/call/synthesize"),
        ("POST", "/gradio_api/queue/join"),
        ("POST", "/v1/audio/speech"),
        ("POST", "/v1/voices"),
        ("PUT", "/v1/glossary"),
        ("DELETE", "/v1/voices/x"),
        ("POST", "/v1/longform/dialogue"),
        ("PATCH", "/v1/voices/x"),
    ]
    refused = total = 0
    with httpx.Client(base_url=app.url.rstrip("/"), trust_env=False, timeout=30) as http:
        for method, path in changes:
            for headers in [{"Origin": origin} for origin in EVIL] + [{"Host": f"rebind.evil.example:{app.port}"}]:
                answer = http.request(method, path, headers=headers, json={"data": ["Hi."]})
                total += 1
                refused += answer.status_code in (401, 403, 421)
    secret = root / "outside" / "secret.txt"
    secret.parent.mkdir(exist_ok=True)
    secret.write_text("campaign-secret")
    link = app.outputs / "link-to-secret.wav"
    if not link.exists():
        link.symlink_to(secret)
    (app.cache / "secret.txt").write_text("campaign-secret")
    (app.root / "models").mkdir(exist_ok=True)
    (app.root / "models" / "secret.txt").write_text("campaign-secret")
    secrets = {
        "outside": secret,
        "link": link,
        "cache": app.cache / "secret.txt",
        "models": app.root / "models" / "secret.txt",
    }
    reads = escapes = 0
    for path in _file_paths(app, secrets):
        for prefix in ("/gradio_api/file=", "/file=", "/gradio_api/file/"):
            _, body = _request(app, prefix + path)  # sent as given: no client normalises the dots away
            reads += 1
            escapes += b"campaign-secret" in body or b"root:" in body
    link.unlink(missing_ok=True)
    return {"cross_origin_refused": refused, "cross_origin_total": total, "file_reads": reads, "file_escapes": escapes}
