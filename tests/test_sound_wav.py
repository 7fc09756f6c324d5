"""One WAV writer: every output (saved job, long-form line, API answer and stream, page player, CLI copy)
stores float samples as the same 16-bit PCM behind the same header."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
from types import SimpleNamespace

import httpx
import numpy as np
import soundfile

from cosyvoice_mac.sound.wav import (
    HEADER_BYTES,
    pcm16,
    read_samples,
    read_wav_info,
    streaming_wav_header,
    wav_bytes,
    wav_from_pcm16,
)
from tests.provenance_check import ai_credentials

RATE = 24000
SAMPLES = np.array([2.0, -2.0, np.nan, 0.5, -0.25, 1e-6, 0.999], np.float32)
EXPECTED = [32767, -32767, 0, 16384, -8192, 0, 32734]  # round(clip(x) * 32767), NaN as 0


def _noise(seconds: float = 0.3) -> np.ndarray:
    return (np.random.default_rng(3).standard_normal(int(seconds * RATE)) * 0.3).astype(np.float32)


def test_wav_encoding_clips_and_cleans_samples():
    data = wav_bytes(SAMPLES, 16000, {"INAM": "x"})
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    pcm = np.frombuffer(data[-2 * len(SAMPLES) :], "<i2")
    assert list(pcm) == EXPECTED


def test_the_wav_bytes_round_trip_through_soundfile_with_their_header(tmp_path):
    data = wav_bytes(SAMPLES, RATE)
    assert len(data) == HEADER_BYTES + 2 * len(SAMPLES)
    assert struct.unpack("<4sI4s", data[:12]) == (b"RIFF", len(data) - 8, b"WAVE")
    assert struct.unpack("<4sIHHIIHH", data[12:36]) == (b"fmt ", 16, 1, 1, RATE, 2 * RATE, 2, 16)
    assert struct.unpack("<4sI", data[36:44]) == (b"data", 2 * len(SAMPLES))
    path = _file(tmp_path, data)
    info = soundfile.info(str(path))
    assert (info.samplerate, info.channels, info.subtype) == (RATE, 1, "PCM_16")
    assert list(soundfile.read(str(path), dtype="int16")[0]) == EXPECTED
    assert wav_bytes(read_samples(path), RATE) == data  # what is read back encodes to the same bytes


def test_info_chunk_and_streaming_header_share_the_format(tmp_path):
    data = wav_bytes(_noise(), RATE, {"ICMT": '{"text": "你好"}', "ISFT": "cosyvoice-mac"})
    path = _file(tmp_path, data)
    assert read_wav_info(path) == {"ICMT": '{"text": "你好"}', "ISFT": "cosyvoice-mac"}
    assert soundfile.read(str(path), dtype="int16")[0].tobytes() == pcm16(_noise())
    header = streaming_wav_header(RATE)
    assert len(header) == HEADER_BYTES and header[12:36] == wav_bytes(SAMPLES, RATE)[12:36]
    assert header[4:8] == header[40:44] == b"\xff\xff\xff\xff"
    assert wav_from_pcm16(pcm16(SAMPLES) + b"\x01", RATE) == wav_bytes(SAMPLES, RATE)  # a stray byte dropped


def test_the_worker_the_api_the_page_and_the_cli_store_the_same_pcm(tmp_path):
    from cosyvoice_mac.api import audio_formats
    from cosyvoice_mac.cli import local, remote
    from cosyvoice_mac.cli.common import EXIT_NOT_SAVED
    from cosyvoice_mac.engine.outputs import write_output
    from cosyvoice_mac.provenance.claim import GENERATION_LABEL
    from cosyvoice_mac.webui.streaming import StreamBuffer, decode_value

    samples = _noise()
    expected = pcm16(samples)
    saved = write_output(tmp_path / "outputs", "job-1", samples, RATE, {"text": "x"})
    assert soundfile.read(str(saved.wav_path), dtype="int16")[0].tobytes() == expected
    assert audio_formats.encode(samples, RATE, "pcm") == expected
    assert audio_formats.encode(samples, RATE, "wav") == wav_bytes(samples, RATE)
    for response_format in ("wav", "flac"):  # libsndfile alone would scale by 32768: one LSB off
        encoded = _file(tmp_path, audio_formats.encode(samples, RATE, response_format))
        assert soundfile.read(str(encoded), dtype="int16")[0].tobytes() == expected, response_format
    player = StreamBuffer("s")
    _, chunks = decode_value(player.add(samples, RATE))
    assert base64.b64decode(player.value.split(",", 1)[1]) == expected and len(chunks) == 1
    stream_bytes = streaming_wav_header(RATE) + expected  # what /v1 streams, as the CLI asks: server-sent events
    events = [
        {"type": "speech.audio.delta", "audio": base64.b64encode(stream_bytes[:1000]).decode()},
        {"type": "speech.audio.delta", "audio": base64.b64encode(stream_bytes[1000:]).decode()},
        {"type": "speech.audio.done", "saved": True, "file": "x.wav"},
    ]
    streamed = httpx.Response(200, content="".join(f"data: {json.dumps(event)}\n\n" for event in events).encode())
    remote._write_stream(None, streamed, tmp_path / "cli-stream.wav", 0.0, "job-1")
    saved_file = saved.wav_path.read_bytes()  # a whole answer is the app's saved WAV, kept byte for byte
    whole = httpx.Response(200, content=saved_file, headers={"x-cosyvoice-sample-rate": str(RATE)})
    remote._write_whole(whole, tmp_path / "cli-whole.wav", "job-1")
    assert (tmp_path / "cli-whole.wav").read_bytes() == saved_file
    assert (tmp_path / "cli-stream.wav").read_bytes() == wav_bytes(samples, RATE)
    unsaved = SimpleNamespace(  # `synth --local` when outputs/ refused the file: the samples, signed
        job_id="job-1", samples=lambda: samples, sample_rate=RATE, duration_s=0.3, seed=1, timings={}, notes=[],
        output_path=None, output_error="the disk is full", sidecar_path=None,
        model="Fun-CosyVoice3-0.5B", mode="zero_shot", prompt_hash="ab" * 32, source_hash=None,
    )  # fmt: skip
    assert local._deliver(unsaved, tmp_path / "synth.wav") == EXIT_NOT_SAVED
    assert soundfile.read(str(tmp_path / "synth.wav"), dtype="int16")[0].tobytes() == expected
    assert ai_credentials((tmp_path / "synth.wav").read_bytes(), "wav")[GENERATION_LABEL]["model"] == unsaved.model


def test_the_sound_package_stays_torch_free():
    code = (
        "import sys; import cosyvoice_mac.sound.limits, cosyvoice_mac.sound.problems, cosyvoice_mac.sound.read, "
        "cosyvoice_mac.sound.prompt_check, cosyvoice_mac.sound.silence, cosyvoice_mac.sound.post, "
        "cosyvoice_mac.sound.wav; print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def _file(folder, data: bytes):
    path = folder / f"written-{len(list(folder.iterdir()))}.wav"
    path.write_bytes(data)
    return path
