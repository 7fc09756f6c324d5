"""``synth`` through the running app: the job waits in the app's one queue with the page's and the API's.

The request goes to the app's ``/v1`` API with ``X-CosyVoice-Interface: cli`` (so its sidecar in the app's
outputs/ says ``interface: cli``). A prompt recording is uploaded with it (``/v1/audio/speech/recording``:
the server never reads a path a client names); a saved voice is named by its id or name. Ctrl-C closes the
connection, and the app cancels a job whose client has gone. Every answer that is not audio becomes one
message for the user (:class:`AppError`), never a traceback.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import sys
import time
from pathlib import Path

import httpx

from cosyvoice_mac.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_NOT_SAVED,
    EXIT_TRY_LATER,
    CommandFailed,
    exit_code_for_error,
)
from cosyvoice_mac.cli.takes import say_check, write_captions_beside
from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.paths import DEFAULT_HOST, DEFAULT_PORT, running_app_url
from cosyvoice_mac.preview import PREVIEW
from cosyvoice_mac.settings import setting
from cosyvoice_mac.sound.wav import HEADER_BYTES, wav_from_pcm16
from cosyvoice_mac.wire import (
    CHECK_HEADER,
    CHECK_NOTE_HEADER,
    FILE_HEADER,
    INTERFACE_HEADER,
    JOB_ID_HEADER,
    KEY_VARIABLE,
    MODELS_PATH,
    RECORDING_SPEECH_PATH,
    SAVED_HEADER,
    SPEECH_PATH,
    TIMESTAMPS_SPEECH_PATH,
    VOICES_PATH,
    WARNING_HEADER,
)

SERVER_VARIABLE = setting("server").env
OWNER = "cosyvoice-mac"  # /v1/models names this owner: the answer comes from this app, not another server
PROBE_TIMEOUT_S = 5.0
LOADING_WAIT_S = 900.0  # a model still loading in the app is waited for (the app's own start limit)


def default_server() -> str:
    """Where a command looks for the app unless --server names it: $COSYVOICE_SERVER, else the address the app
    serving this machine's voice library recorded (any port), else the app's default address."""
    return os.environ.get(SERVER_VARIABLE, "").strip() or running_app_url() or f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"


class AppError(CommandFailed):
    """The app answered, but not with audio; the message says why and what to do, ``exit_code`` whose fault
    it was (``cli.common.exit_code_for_error``)."""


class NoApp(CosyVoiceError):
    """Nothing usable answers at the address: no server there, or a server that is not this app."""


def connect(args) -> AppClient | None:
    """The running app to send this command's work to, probed (``--server``, else the default address);
    None with ``--local``, or when nothing answers at the default address (said on stderr). CosyVoiceError
    when the ``--server`` named does not answer, AppError when the app refuses the key."""
    if args.local:
        return None
    app = AppClient(args.server or default_server(), args.api_key)
    try:
        app.probe()
    except NoApp as error:
        app.close()
        if args.server:
            raise CosyVoiceError(f"{error}; leave out --server (or give --local) to run the model here") from None
        print(f"note: {error}; running the model in this process", file=sys.stderr)
        return None
    except BaseException:
        app.close()
        raise
    return app


def note_local_only(args, flags: dict) -> None:
    """Say which of ``flags`` (flag -> (argument, default)) were given but apply only to a local model."""
    ignored = [flag for flag, (name, default) in flags.items() if getattr(args, name) != default]
    if ignored:
        print(f"note: the app runs its own model, so {', '.join(ignored)} apply only with --local", file=sys.stderr)


class AppClient:
    """Owns the HTTP connection to one running app (its base URL and the API key it is sent)."""

    def __init__(self, url: str, api_key: str | None):
        self.url = url.rstrip("/")
        key = api_key if api_key is not None else os.environ.get(KEY_VARIABLE)
        headers = {INTERFACE_HEADER: "cli"}
        if key and key.strip():
            headers["Authorization"] = f"Bearer {key.strip()}"
        self.http = httpx.Client(base_url=self.url, headers=headers, trust_env=False)
        self._voice_asked: str | None = None

    def close(self) -> None:
        self.http.close()

    def probe(self) -> None:
        """Raise NoApp unless this app answers here; AppError when it does but refuses the key."""
        try:
            answer = self.http.get(MODELS_PATH, timeout=PROBE_TIMEOUT_S)
        except httpx.TransportError as error:
            raise NoApp(f"no app answers at {self.url} ({_transport_reason(error)})") from None
        if answer.status_code in (401, 403) and _error_of(answer) is not None:
            raise self.explain(answer)
        try:
            owners = {entry.get("owned_by") for entry in answer.json()["data"]}
        except (ValueError, KeyError, TypeError, AttributeError):
            owners = set()
        if answer.status_code != 200 or OWNER not in owners:
            raise NoApp(
                f"{self.url} answers, but it is not CosyVoice for Mac "
                f"(GET {MODELS_PATH} gave HTTP {answer.status_code})"
            )

    def explain(self, answer: httpx.Response) -> AppError:
        """The app's error answer as one message for the user."""
        error = _error_of(answer) or {"message": answer.text[:200] or f"HTTP {answer.status_code}"}
        if "type" not in error:  # not the API's shape (a proxy's page, say): its status says whose fault
            error["type"] = "server_error" if answer.status_code >= 500 else "invalid_request_error"
        if answer.status_code == 401:
            error["type"] = "authentication_error"
        return self.explain_error(error, answer.headers.get("retry-after"), answer.status_code)

    def explain_error(self, error: dict, retry: str | None, status: int | None = None) -> AppError:
        """An error in OpenAI's shape (an answer's body, or a stream's ``error`` event) as one message; its exit
        code by ``cli.common.exit_code_for_error``."""
        message, code, param, kind = error.get("message", ""), error.get("code"), error.get("param"), error.get("type")
        exit_code = exit_code_for_error(kind, retry)
        later = f"try again in {retry or 'a few'} s"
        if kind == "rate_limit_error":
            return AppError(f"the app's queue is full, so it did not take this job; {later}", exit_code)
        if code == "model_loading":
            return AppError(f"the app's model is still loading; {later}", exit_code)
        if code == "engine_restarted":
            return AppError(
                f"the app's model process crashed while it ran this job and was restarted ({message}); {later}",
                exit_code,
            )
        if kind == "authentication_error":
            return AppError(
                f"the app at {self.url} refused the request: {message}. "
                f"Pass --api-key KEY or set {KEY_VARIABLE} to the key the app was started with",
                exit_code,
            )
        if status == 403:
            return AppError(f"the app at {self.url} refused the request: {message}", exit_code)
        if code == "voice_not_found":
            return AppError(
                f"the app has no voice {self._voice_asked!r} (its voices: {self._voice_names()}); "
                "save one on its page, or speak in a recording's voice with --prompt-wav",
                exit_code,
            )
        if kind != "server_error" and param:
            return AppError(f"the app refused the request ({_flag(param)}): {message}", exit_code)
        if kind == "server_error":
            return AppError(f"the app failed on this job: {message}" + (f"; {later}" if retry else ""), exit_code)
        return AppError(f"the app could not do it: {message}", exit_code)

    def _voice_names(self) -> str:
        try:
            names = [entry["name"] for entry in self.http.get(VOICES_PATH, timeout=PROBE_TIMEOUT_S).json()["data"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return "unknown"
        return ", ".join(names) or "none saved yet"

    def _send(self, voice, body: dict, path: str = SPEECH_PATH) -> httpx.Response:
        """The speech request, its answer's body still to be read (the caller closes it): the recording
        uploaded with the request, or the saved voice named in its body (sent to ``path``)."""
        timeout = httpx.Timeout(PROBE_TIMEOUT_S, read=None, write=120.0)
        if voice.kind == "audio":
            prompt = Path(voice.audio)
            upload = {"prompt_audio": (prompt.name, prompt.read_bytes())}
            built = self.http.build_request(
                "POST", RECORDING_SPEECH_PATH, data={"body": json.dumps(body)}, files=upload, timeout=timeout
            )
        else:
            body = {**body, "voice": voice.saved if voice.kind == "saved" else PREVIEW, "style": voice.style}
            self._voice_asked = body["voice"]
            built = self.http.build_request("POST", path, json=body, timeout=timeout)
        return self.http.send(built, stream=True)

    def speak(self, request, model: str | None, out: Path, stream: bool, captions: str | None = None) -> int:
        """Send ``request`` (a checked Request) to the app's queue and write the audio to ``out`` (and, with
        ``captions``, its words' times beside it: the app's with-timestamps answer, for a saved voice)."""
        if stream and (request.post.trim or request.post.loudness_lufs is not None):
            # the app streams the model's raw audio only; post-processing needs the whole of it
            print("note: --trim/--loudness need the whole audio, so the app sends it in one piece", file=sys.stderr)
            stream = False
        body = {
            "model": Path(model).name if model else "tts-1",
            "input": request.text,
            "instructions": request.instruct,
            "prompt_text": request.voice.transcript,
            "seed": request.seed,
            "speed": request.speed,
            # A whole answer is the WAV file the app saved, as it is (its content credentials and INFO chunk
            # included). A stream comes as a WAV whose header gives the rate, in server-sent events: the last
            # one says whether the app saved the result, or why it failed.
            "response_format": "wav",
            "stream": stream,
            **({"stream_format": "sse"} if stream else {}),
            "trim": request.post.trim,
            "loudness_lufs": request.post.loudness_lufs,
            **request.sampling.given(),
            "check": request.check,
        }
        if captions and not stream and request.voice.kind != "audio" and request.check is not False:
            timed = lambda: self._send(request.voice, body, TIMESTAMPS_SPEECH_PATH)  # noqa: E731
            return self.deliver(timed, out, stream, captions)
        if captions:
            print("note: the app times the words of a saved voice's whole take; use --local for this", file=sys.stderr)
        return self.deliver(lambda: self._send(request.voice, body), out, stream)

    def deliver(self, send, out: Path, stream: bool, captions: str | None = None) -> int:
        """Send with ``send()`` (an ``httpx.Response`` opened as a stream) until the app takes the job (again
        while its model loads), then write the audio to ``out``; the exit status. Ctrl-C closes the
        connection, which makes the app drop the job."""
        loading_until = time.monotonic() + LOADING_WAIT_S
        print(f"sent to the app at {self.url}; waiting in its queue", file=sys.stderr)
        clock = time.perf_counter()
        try:
            while True:
                answer = send()
                if answer.status_code == 200:
                    break
                answer.read()
                answer.close()
                problem = self.explain(answer)
                if (_error_of(answer) or {}).get("code") != "model_loading" or time.monotonic() > loading_until:
                    raise problem
                print("the app's model is still loading; sending again once it is ready", file=sys.stderr)
                time.sleep(min(30.0, float(answer.headers.get("retry-after") or 5)))
            try:
                job_id = answer.headers.get(JOB_ID_HEADER, "?")
                if stream:
                    return _write_stream(self, answer, out, clock, job_id)
                return _write_whole(answer, out, job_id, captions)
            finally:
                answer.close()  # early (Ctrl-C): the app sees its client leave and cancels the job
        except KeyboardInterrupt:
            print("cancelled (Ctrl-C): the connection is closed, so the app drops the job", file=sys.stderr)
            return EXIT_INTERRUPTED
        except httpx.TransportError as error:
            raise AppError(
                f"the connection to the app broke off ({_transport_reason(error)}); if the app is still running, "
                "try again",
                EXIT_TRY_LATER,
            ) from None


def _write_whole(answer: httpx.Response, out: Path, job_id: str, captions: str | None = None) -> int:
    """The app's whole WAV file, written to ``out`` byte for byte (the file it saved, credentials and all); with
    ``captions``, the with-timestamps answer: that file in base64 beside its words."""
    body = answer.read()
    timed = json.loads(body) if captions else None
    _save(out, base64.b64decode(timed["audio_base64"]) if timed else body)
    name = answer.headers.get(FILE_HEADER)
    saved = f"; the app saved it as {name} with its sidecar" if name else ""
    print(
        f"wrote {out} ({float(answer.headers.get('x-cosyvoice-duration', 0)):.2f} s, "
        f"seed {answer.headers.get('x-cosyvoice-seed', '?')}, job {job_id[:8]}){saved}"
    )
    note = answer.headers.get(CHECK_NOTE_HEADER)
    say_check(answer.headers.get(CHECK_HEADER), [note] if note else [])
    if timed:
        write_captions_beside(out, timed["words"], captions)
    if answer.headers.get(SAVED_HEADER) == "false":
        return _not_saved(_warning_text(answer.headers.get(WARNING_HEADER, "")))
    return 0


def _write_stream(app: AppClient, answer: httpx.Response, out: Path, clock: float, job_id: str) -> int:
    """The streamed WAV (server-sent events of base64 pieces: a header of unknown length, then 16-bit PCM)
    written with its real sizes; the last event says whether the app saved it."""
    received = bytearray()
    heard, done = False, None
    for line in answer.iter_lines():
        if not line.startswith("data:"):
            continue
        event = json.loads(line[len("data:") :])
        if event.get("type") == "speech.audio.delta":
            received += base64.b64decode(event["audio"])
            if not heard and len(received) > HEADER_BYTES:
                heard = True
                print(f"first audio after {time.perf_counter() - clock:.2f} s", file=sys.stderr)
        elif event.get("type") == "error":
            raise app.explain_error(event.get("error") or event, _retry_after(event))
        elif event.get("type") == "speech.audio.done":
            done = event
    if done is None:
        raise AppError("the app's stream ended before its last event (it may have stopped); try again", EXIT_TRY_LATER)
    if len(received) < HEADER_BYTES or received[:4] != b"RIFF":
        raise AppError("the app's stream ended before any audio came")
    sample_rate = struct.unpack("<I", bytes(received[24:28]))[0]
    pcm = bytes(received[HEADER_BYTES:])
    _save(out, wav_from_pcm16(pcm, sample_rate))
    seconds = len(pcm) / 2 / sample_rate
    saved = f"; the app saved it as {done['file']} with its sidecar" if done.get("saved") else ""
    print(f"wrote {out} ({seconds:.2f} s, job {job_id[:8]}){saved}")
    return 0 if done.get("saved", True) else _not_saved(done.get("warning") or "")


def _not_saved(reason: str) -> int:
    """Say that the app made the audio (``--out`` has it) but could not keep it in its outputs/."""
    print(f"warning: the app made the audio but did not save it in its outputs: {reason}", file=sys.stderr)
    return EXIT_NOT_SAVED


def _warning_text(header: str) -> str:
    """The reason in an RFC 7234 ``Warning: 199 - "reason"`` header."""
    quoted = header.partition('"')[2].rpartition('"')[0] or header
    return quoted.replace('\\"', '"').replace("\\\\", "\\")


def _retry_after(event: dict) -> str | None:
    seconds = event.get("retry_after")
    return None if seconds is None else str(seconds)


def _save(out: Path, data: bytes) -> None:
    from cosyvoice_mac.paths import atomic_write

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, data)


def _error_of(answer: httpx.Response) -> dict | None:
    try:
        error = answer.json().get("error")
    except (ValueError, AttributeError):
        return None
    return error if isinstance(error, dict) else None


# The API's body fields -> this command's flags, so a refusal names what the user typed.
FLAGS = {
    "input": "--text",
    "prompt_text": "--prompt-text",
    "instructions": "--instruct",
    "seed": "--seed",
    "speed": "--speed",
    "voice": "--voice",
    "style": "--style",
    "prompt_audio": "--prompt-wav",
    "model": "--model",
    "trim": "--trim",
    "loudness_lufs": "--loudness",
    "audio": "SOURCE",  # convert's recording
}


def _flag(param: str) -> str:
    return FLAGS.get(param, param)


def _transport_reason(error: httpx.TransportError) -> str:
    if isinstance(error, httpx.ConnectError):
        return "connection refused: is it running? Start it with `bash run.sh`"
    if isinstance(error, httpx.TimeoutException):
        return "it did not answer in time"
    return f"{type(error).__name__}: {error}"
