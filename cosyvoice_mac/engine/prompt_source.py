"""Inside the worker: where a request's speaker prompt comes from (a recording, samples, a saved voice or the
backend's own voice), decoding a recording at most once and extracting its features at most once per model.

Imported only by the worker's runtime (it calls the pipeline).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import numpy as np

from cosyvoice_mac.engine.cache import SpeakerCache
from cosyvoice_mac.errors import InputError
from cosyvoice_mac.frontend.inline import Spoken, parse_inline
from cosyvoice_mac.frontend.prompt_audio import decode_prompt
from cosyvoice_mac.pipeline.types import PromptAudio, SynthesisError
from cosyvoice_mac.request import Request

HASH_MEMO_ENTRIES = 256


class PromptSource:
    """Owns the memo from a recording's exact bytes to its decoded audio's hash, and the count of feature
    extractions; the speaker cache (memory and disk) is the runtime's and is shared here."""

    def __init__(self, cache: SpeakerCache):
        self.cache = cache
        self.extractions = 0
        self._hash_memo: OrderedDict[str, str] = OrderedDict()

    def from_audio(self, pipeline, source, sample_rate, transcript):
        """(SpeakerPrompt, cache source) of a recording (a path or samples), decoding it at most once.

        The cache key is the hash of the decoded audio; it is remembered by the input's exact bytes, so a
        recording this worker has seen costs a read and a SHA-256 (a millisecond), not a decode.
        """
        audio_hash, decoded = self._content_hash(source, sample_rate)

        def extract():
            self.extractions += 1
            return pipeline.prepare_prompt(
                decoded or decode_prompt(source, sample_rate), sample_rate=sample_rate, transcript=transcript
            )

        return self.cache.get_or_extract(pipeline.model_id, audio_hash, extract, transcript)

    def prepare_saved(self, pipeline, entries: dict[str, dict]) -> dict[str, dict]:
        """Make sure each saved voice (name -> the engine's library entry) has features for ``pipeline``'s
        model in the cache: the ones found there cost a lookup, the others are extracted together in one
        ``pipeline.prepare_prompts`` call (each ONNX frontend loaded once for all of them).

        Returns name -> ``{"audio_hash", "cache": "memory" | "disk" | "extracted"}``, or ``{"error": why}`` for
        a voice that cannot be used with this model (the others are prepared all the same).
        """
        outcomes: dict[str, dict] = {}
        missing: list[tuple[str, str, object]] = []  # (name, audio hash, what to decode)
        for name, entry in entries.items():
            try:
                if entry.get("model_id") == pipeline.model_id:
                    prompt, source = self.cache.lookup(pipeline.model_id, entry["audio_hash"])
                    if prompt is not None:
                        outcomes[name] = {"audio_hash": prompt.audio_hash, "cache": source}
                        continue
                audio_hash, decoded = self._content_hash(self._stored_audio(name, entry), None)
                prompt, source = self.cache.lookup(pipeline.model_id, audio_hash)
                if prompt is not None:
                    outcomes[name] = {"audio_hash": audio_hash, "cache": source}
                else:
                    missing.append((name, audio_hash, decoded or entry["audio_path"]))
            except InputError as error:
                outcomes[name] = {"error": str(error)}
        if missing:
            self.extractions += len(missing)
            made = pipeline.prepare_prompts([PromptAudio(audio) for _, _, audio in missing])
            for (name, audio_hash, _), prompt in zip(missing, made):
                if isinstance(prompt, InputError):
                    outcomes[name] = {"error": str(prompt)}
                    continue
                self.cache.put(replace(prompt, audio_hash=audio_hash, model_id=pipeline.model_id))
                outcomes[name] = {"audio_hash": audio_hash, "cache": "extracted"}
        return {name: outcomes[name] for name in entries}

    def _content_hash(self, source, sample_rate) -> tuple[str, object]:
        """(the decoded audio's content hash, the decoded prompt or None when the memo already knew the hash)."""
        if isinstance(source, np.ndarray):
            raw = hashlib.sha256(np.ascontiguousarray(source).tobytes())
            raw.update(f"{source.dtype}{source.shape}{sample_rate}".encode())
        elif Path(source).is_file():
            raw = hashlib.sha256(Path(source).read_bytes())
        else:
            raise SynthesisError(
                f"the prompt audio file {source} does not exist any more; upload it again", field="prompt_audio"
            )
        digest = raw.hexdigest()
        decoded = None
        if digest not in self._hash_memo:
            decoded = decode_prompt(source, sample_rate)
            self._hash_memo[digest] = decoded.content_hash
            while len(self._hash_memo) > HASH_MEMO_ENTRIES:
                self._hash_memo.popitem(last=False)
        self._hash_memo.move_to_end(digest)
        return self._hash_memo[digest], decoded

    @staticmethod
    def _stored_audio(name: str, entry: dict) -> str:
        """A saved voice's stored recording; SynthesisError when it has none to extract features from."""
        if not entry.get("audio_path"):
            raise SynthesisError(
                f"the saved voice {name!r} has no cached features for this model and "
                "no stored audio; upload its prompt audio again and save it under that name",
                field="voice",
            )
        return entry["audio_path"]

    def style_speakers(self, pipeline, request: Request, voice_entry: dict | None) -> dict:
        """The saved voice's recordings (style -> SpeakerPrompt, with each recording's transcript) that the
        request's ``(style)`` tags name: only those, each found in the cache or extracted once like the voice's
        own. Empty for any other voice, and for a text without such a tag (a tag of a style the voice has no
        recording of becomes the model's instruction). ``voice_entry["recordings"]`` lists the voice's
        recordings as the engine's library keeps them (``VoiceStyles.styled``)."""
        if request.voice.kind != "saved" or not voice_entry:
            return {}
        recordings = {recording["style"]: recording for recording in voice_entry.get("recordings") or ()}
        asked = {part.style for part in parse_inline(request.text, recordings) if isinstance(part, Spoken)}
        speakers = {}
        for style in recordings.keys() & asked:
            name, recording = f"{request.voice.saved} ({style})", recordings[style]
            speakers[style], _ = self._saved_prompt(pipeline, name, recording, recording["transcript"])
        return speakers

    def _saved_prompt(self, pipeline, name: str, entry: dict, transcript: str | None):
        """(SpeakerPrompt, cache source) of a saved recording for ``pipeline``'s model, with ``transcript``: the
        cache's when the recording was prepared for this model, else made from its stored audio (then cached)."""
        if entry.get("model_id") == pipeline.model_id:
            prompt, source = self.cache.lookup(entry["model_id"], entry["audio_hash"])
            if prompt is not None:
                return replace(prompt, transcript=transcript), source
        return self.from_audio(pipeline, self._stored_audio(name, entry), None, transcript)

    def for_request(self, pipeline, request: Request, voice_entry: dict | None):
        """(SpeakerPrompt, cache source) for the request's saved voice or recording. ``voice_entry`` is the
        engine's library entry of a saved voice (the worker never reads the library itself)."""
        voice, transcript = request.voice, request.transcript
        if voice.kind == "stock":  # the backend's own voice (the preview voice's Piper speaker)
            speaker = pipeline.stock_speaker()
            if speaker is None:
                raise SynthesisError(
                    "this model has no voice of its own: upload or record a prompt, or pick a saved voice",
                    field="voice",
                )
            return speaker, "stock"
        if voice.kind != "saved":
            source = voice.audio if voice.kind == "audio" else voice.samples
            return self.from_audio(pipeline, source, voice.sample_rate, transcript)
        if voice_entry is None:
            raise SynthesisError(
                f"the saved voice {voice.saved!r} reached the model without its library entry", field="voice"
            )
        return self._saved_prompt(pipeline, voice.saved, voice_entry, transcript)
