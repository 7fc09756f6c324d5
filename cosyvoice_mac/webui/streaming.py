"""Playing a generation while it is made: the engine's streamed chunks go to a small Web Audio player.

Gradio's own streaming audio output encodes every chunk to AAC with an ffmpeg process on the server,
which a Mac rarely has; this player needs nothing on the server. The generate event writes the player's
value, a text that only ever grows during one generation, so Gradio sends each new chunk once (its
generator updates carry only what was appended) and a chunk is never lost when two updates land together:

    <stream id>;<sample rate>,<base64 little-endian PCM16>;<sample rate>,<base64 ...>;...

The last update of a generation sets the value back to the bare stream id: Gradio re-sends an event's
last value whole when it completes, and neither side needs the audio any more (the saved file is the
result). The player keeps playing what it has scheduled; a new id starts a new stream.

The browser part (``PLAYER_JS``) schedules each new chunk right after the previous one on one
AudioContext, which it unlocks on the user's first click or key press (browsers start audio only after
one). It keeps counts on the player element (``data-chunks``, ``data-first-chunk-ms``, ``data-state``)
for tests and for anyone debugging, and shows no words of its own: the status line speaks for it.
"""

from __future__ import annotations

import base64
import uuid

import numpy as np

from cosyvoice_mac.sound.wav import pcm16

SEPARATOR = ";"


class StreamBuffer:
    """Owns one generation's streamed audio as the player's value (see the module docstring)."""

    def __init__(self, stream_id: str | None = None):
        self.stream_id = stream_id or uuid.uuid4().hex
        self.value = self.stream_id
        self.chunks = 0
        self.seconds = 0.0

    def add(self, audio: np.ndarray, sample_rate: int) -> str:
        """Append one chunk of (N,) float audio in [-1, 1]; the player's new value."""
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        if samples.size == 0:
            return self.value
        pcm = pcm16(samples)
        self.value += f"{SEPARATOR}{int(sample_rate)},{base64.b64encode(pcm).decode('ascii')}"
        self.chunks += 1
        self.seconds += samples.size / sample_rate
        return self.value

    def restart(self) -> str:
        """Start over under a new id (the job is retried from its beginning): the player drops what it had."""
        self.__init__()
        return self.value


def decode_value(value: str) -> tuple[str, list[tuple[int, np.ndarray]]]:
    """(stream id, [(sample rate, float32 samples)]) of a player value; the inverse of StreamBuffer."""
    stream_id, *entries = value.split(SEPARATOR)
    chunks = []
    for entry in entries:
        rate, data = entry.split(",", 1)
        pcm = np.frombuffer(base64.b64decode(data), dtype="<i2")
        chunks.append((int(rate), pcm.astype(np.float32) / 32768.0))
    return stream_id, chunks


PLAYER_HTML = '<div class="cv-stream-player" data-state="idle" data-chunks="0"></div>'

# Runs once when the player mounts. ``element``, ``props`` and ``watch`` come from gr.HTML.
PLAYER_JS = r"""
const box = element.querySelector('.cv-stream-player') || element;
const state = {context: null, stream: null, done: 0, next: 0, sources: [], muted: false};
function unlock() {
  const Context = window.AudioContext || window.webkitAudioContext;
  if (!Context) return null;
  if (!state.context) state.context = new Context();
  if (state.context.state === 'suspended') state.context.resume();
  return state.context;
}
function silence() {
  for (const source of state.sources) { try { source.stop(); } catch (error) { /* already ended */ } }
  state.sources = [];
  state.next = 0;
}
function stop() {  // the Stop button: chunks still on their way for this stream are not played either
  silence();
  state.muted = true;
  mark('state', 'stopped');
}
function mark(name, value) { box.dataset[name] = String(value); }
function play(entry) {
  const comma = entry.indexOf(',');
  const rate = Number(entry.slice(0, comma));
  const bytes = atob(entry.slice(comma + 1));
  const count = bytes.length >> 1;
  const context = unlock();
  mark('chunks', Number(box.dataset.chunks || 0) + 1);
  mark('receivedSeconds', (Number(box.dataset.receivedSeconds || 0) + count / rate).toFixed(3));
  if (!box.dataset.firstChunkMs) mark('firstChunkMs', performance.now().toFixed(1));
  if (!context || count === 0 || state.muted) return;
  const buffer = context.createBuffer(1, count, rate);
  const samples = buffer.getChannelData(0);
  for (let i = 0; i < count; i++) {
    let value = bytes.charCodeAt(2 * i) | (bytes.charCodeAt(2 * i + 1) << 8);
    if (value >= 32768) value -= 65536;
    samples[i] = value / 32768;
  }
  const source = context.createBufferSource();
  source.buffer = buffer;
  source.connect(context.destination);
  const start = Math.max(context.currentTime + 0.05, state.next);
  source.start(start);
  state.next = start + buffer.duration;
  state.sources.push(source);
  source.onended = () => {
    state.sources = state.sources.filter(other => other !== source);
    if (!state.sources.length && box.dataset.state === 'playing') mark('state', 'ended');
  };
  mark('state', context.state === 'running' ? 'playing' : 'waiting-for-click');
  if (!box.dataset.firstPlayMs) mark('firstPlayMs', performance.now().toFixed(1));
}
function update() {
  const parts = String(props.value || '').split(';');
  if (parts[0] !== state.stream) {
    silence();
    state.muted = false;
    state.stream = parts[0];
    state.done = 0;
    for (const name of ['firstChunkMs', 'firstPlayMs', 'receivedSeconds']) delete box.dataset[name];
    mark('chunks', 0);
    mark('stream', parts[0]);
    mark('state', parts[0] ? 'waiting' : 'idle');
  }
  for (let i = state.done + 1; i < parts.length; i++) play(parts[i]);
  state.done = Math.max(state.done, parts.length - 1);
}
document.addEventListener('pointerdown', unlock, true);
document.addEventListener('keydown', unlock, true);
window.cosyvoiceStreamPlayer = {stop, unlock};
watch('value', update);
update();
"""

STOP_JS = "() => { if (window.cosyvoiceStreamPlayer) window.cosyvoiceStreamPlayer.stop(); }"
