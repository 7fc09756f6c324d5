"""How ``/v1/audio/speech`` streams, and how a stream ends when the job fails after its headers went out.

A streamed answer's status line and headers leave before the job is over, so what happens later travels in
the body, in a way a client can tell apart from success:

* ``stream_format: "sse"``: OpenAI's ``speech.audio.delta`` events, then ``speech.audio.done``, which also
  says whether the result was saved in outputs/ (``saved``, and ``warning`` with the reason when it was not) and
  how the take check judged the sentences after they were sent (``check``, ``check_note``);
  a failure instead ends the stream with an ``error`` event in OpenAI's error shape (``error.type``
  ``server_error`` for a fault of the server; ``retry_after``, seconds, when the same request should work then).
* raw ``wav`` / ``pcm``: the audio bytes only. A failure (e.g. the model process was killed) closes the
  connection without the chunked body's last, empty chunk, so the client's HTTP library reports an
  incomplete body (httpx: ``RemoteProtocolError``; curl: exit 18) instead of a short file that looks whole.
  Whether the result was saved is not said on this form (ask for ``sse`` to know).

Either way the failure is logged as one line (an expected error, no traceback).
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

from fastapi.responses import StreamingResponse

from cosyvoice_mac.api.errors import ApiError
from cosyvoice_mac.sound.wav import pcm16, streaming_wav_header

LOG = logging.getLogger("cosyvoice_mac.api")


@dataclass
class StreamEnd:
    """What followed the last audio piece of a stream: the job's result, or the failure that ended it."""

    result: object | None = None
    failure: ApiError | None = None


class CutOnFailure(StreamingResponse):
    """A StreamingResponse whose body iterator may end by raising ApiError: the connection is then closed
    without the chunked body's end (the client sees an incomplete body) and the reason is logged as one
    line, instead of an exception escaping into the ASGI server (its traceback, and a body that looks whole)."""

    def __init__(self, content, job_id: str, **options):
        super().__init__(content, **options)
        self.job_id = job_id

    async def stream_response(self, send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except ApiError as error:
            LOG.warning("stream of job %s cut (%s): %s", self.job_id[:8], error.code, error.message)
            return  # no final chunk: the server closes the connection on an unfinished response
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def audio_bytes(first, pieces: AsyncIterator, response_format: str, end: StreamEnd) -> AsyncIterator[bytes]:
    """The stream's bytes: the WAV header (for wav), then each piece's samples as they come. ``end`` gets the
    job's result; a failure is raised (ApiError) after the last piece that came."""
    header_sent = response_format != "wav"
    item = first
    try:
        while isinstance(item, tuple):
            samples, sample_rate = item
            if not header_sent:
                header_sent = True
                yield streaming_wav_header(sample_rate)
            yield pcm16(samples)
            item = await pieces.__anext__()
        end.result = item
        if not header_sent:  # nothing was streamed (the job made no audio): still a valid, empty WAV
            yield streaming_wav_header(item.sample_rate)
    finally:
        await pieces.aclose()  # the client went away: the job is cancelled


async def sse_stream(
    first, pieces: AsyncIterator, response_format: str, characters: int, job_id: str
) -> AsyncIterator[bytes]:
    """OpenAI's speech events: ``speech.audio.delta`` (base64 audio), then ``speech.audio.done`` (with
    ``saved`` and, when not saved, ``warning``), or an ``error`` event when the job fails on the way."""
    end = StreamEnd()
    try:
        async for chunk in audio_bytes(first, pieces, response_format, end):
            yield event({"type": "speech.audio.delta", "audio": base64.b64encode(chunk).decode("ascii")})
    except ApiError as error:  # the status line is long gone: the failure travels as an event
        LOG.warning("stream of job %s ended with an error event (%s): %s", job_id[:8], error.code, error.message)
        yield event(error.event())
        return
    saved = save_facts(end.result)
    yield event(
        {
            "type": "speech.audio.done",
            "usage": {"input_tokens": characters, "output_tokens": 0, "total_tokens": characters},
            **saved,
            **check_facts(end.result),
        }
    )


def check_facts(result) -> dict:
    """A streamed job's take check, for its last event: ``check`` (passed or flagged: a sentence already heard is
    judged after the fact, never replaced) and ``check_note``; nothing when the job was not checked."""
    status = getattr(result, "check_status", None)
    if status is None:
        return {}
    notes = [sentence["note"] for sentence in result.check["sentences"] if sentence.get("note")]
    return {"check": status, **({"check_note": "; ".join(notes)} if notes else {})}


def save_facts(result) -> dict:
    """``saved`` (and ``file``, or ``warning`` with the reason) of a finished job, for a stream's last event
    (the JobResult says why its files could not be written: ``output_error``)."""
    if result is not None and result.output_path:
        return {"saved": True, "file": Path(result.output_path).name}
    return {"saved": False, "warning": getattr(result, "output_error", None) or "the result was not saved"}


def event(data: dict) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode("utf-8")
