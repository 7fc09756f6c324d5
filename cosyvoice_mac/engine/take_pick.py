"""Another kept take as a result's output: when a sentence of a job was made more than once, every take of each of
its sentences is kept in outputs/takes/<job id>/ with its timed words (``takes.JobTakes.keep_takes``). Picking one
puts it in the saved WAV, rebuilt the way the job built it (the sentences' takes joined, then post-processed as its
request asked), writes its captions again, and records the pick in its sidecar's ``check``: the sentence's ``kept``
take, ``picked`` true, and a note saying which take the check had kept. No take file is removed, so a pick can be
undone by picking again. Torch-free: the page's process does it, without the model.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np

from cosyvoice_mac.engine.sidecar import Sidecar, read_sidecar
from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.paths import atomic_write
from cosyvoice_mac.pipeline.takes import FLAGGED, PASSED, RETAKEN, Word
from cosyvoice_mac.pipeline.takes.captions import SUFFIXES, write_captions
from cosyvoice_mac.pipeline.takes.words import on_timeline
from cosyvoice_mac.provenance import MEDIA_TYPES, with_credentials
from cosyvoice_mac.request import PostSettings
from cosyvoice_mac.sound.post import post_process
from cosyvoice_mac.sound.wav import read_samples, wav_bytes


class TakePickError(CosyVoiceError):
    """The take asked for cannot be put in the result; the message says why."""


def takes_to_pick(check: dict | None) -> list[tuple[int, int, dict]]:
    """(sentence, take, the take's entry) of every take that could replace its sentence's kept one (1-based): the
    takes of sentences made more than once, the kept ones left out."""
    sentences = (check or {}).get("sentences", [])
    if not all(take.get("file") for sentence in sentences for take in sentence.get("takes", [])):
        return []  # the output is rebuilt from every sentence's take: each must have been kept
    found = []
    for index, sentence in enumerate(sentences, 1):
        takes = sentence.get("takes", [])
        if len(takes) > 1:
            found += [(index, number, take) for number, take in enumerate(takes, 1) if number != sentence.get("kept")]
    return found


def use_take(wav_path: str | Path, sentence: int, take: int) -> dict:
    """Make take ``take`` of sentence ``sentence`` (both 1-based) the one in the result saved at ``wav_path``; the
    result's new ``check``. TakePickError when the result or that take cannot be used (nothing is changed then)."""
    wav = Path(wav_path)
    sidecar = read_sidecar(wav.with_suffix(".json"))
    check = copy.deepcopy(sidecar.recorded.get("check")) if sidecar is not None else None
    if not check or not check.get("sentences"):
        raise TakePickError(f"{wav.name} has no checked takes to choose from")
    if (sentence, take) not in {(index, number) for index, number, _ in takes_to_pick(check)}:
        kept = check["sentences"][sentence - 1].get("kept") if 0 < sentence <= len(check["sentences"]) else None
        if kept == take:
            raise TakePickError(f"take {take} is already sentence {sentence}'s take in {wav.name}")
        raise TakePickError(f"{wav.name} has no take {take} of sentence {sentence} kept to choose")
    outputs = wav.parent
    chosen = [entry.get("kept", 1) for entry in check["sentences"]]
    chosen[sentence - 1] = take
    files = [outputs / check["sentences"][index]["takes"][number - 1]["file"] for index, number in enumerate(chosen)]
    missing = [path.name for path in files if not path.is_file()]
    if missing:
        raise TakePickError(f"the takes {', '.join(missing)} are no longer in {outputs / 'takes'}")
    rate = sidecar.sample_rate
    pieces = [read_samples(path) for path in files]
    post = sidecar.recorded.get("post") or {}
    settings = PostSettings(bool(post.get("trim", False)), post.get("loudness_lufs"))
    audio, report = post_process(np.concatenate(pieces), rate, settings)
    starts = np.cumsum([0, *(len(piece) for piece in pieces[:-1])]) / rate - report.trimmed_start_ms / 1000
    duration = len(audio) / rate
    words = [
        word
        for word in on_timeline([(float(at), _take_words(path)) for at, path in zip(starts, files)])
        if word.end > 0 and word.start < duration
    ]
    _record_pick(check, sentence, take)
    facts = {**sidecar.recorded, "check": check, "post": report.as_dict(), "duration_s": round(duration, 3)}
    facts["notes"] = [*(sidecar.recorded.get("notes") or []), check["sentences"][sentence - 1]["note"]]
    unsigned = wav_bytes(audio, rate, Sidecar.read(facts).wav_info())
    # the rebuilt file is signed again: the old credentials bound the old samples (as they are when signing fails)
    data, failed = with_credentials(unsigned, MEDIA_TYPES["wav"], facts, wav.name)
    if failed:
        facts["notes"].append(failed)
    atomic_write(wav, data)
    atomic_write(wav.with_suffix(".json"), Sidecar.read(facts).json_bytes())
    if words:
        write_captions(wav, words)
    return check


def _record_pick(check: dict, sentence: int, take: int) -> None:
    """The sentence's kept take is ``take``, picked by hand; its status and the check's follow the take's verdict."""
    entry = check["sentences"][sentence - 1]
    count, before = len(entry["takes"]), entry.get("kept")
    entry.update(kept=take, picked=True)
    entry["status"] = RETAKEN if entry["takes"][take - 1].get("passed") else FLAGGED
    entry["note"] = f"take {take} of {count} picked by hand (the check had kept take {before})"
    statuses = {sentence.get("status") for sentence in check["sentences"]}
    check["status"] = FLAGGED if FLAGGED in statuses else RETAKEN if RETAKEN in statuses else PASSED


def _take_words(take_wav: Path) -> list[Word]:
    try:
        listed = json.loads(take_wav.with_suffix(SUFFIXES["json"]).read_text(encoding="utf-8"))
        return [Word(str(item["word"]), float(item["start"]), float(item["end"])) for item in listed]
    except (OSError, ValueError, KeyError, TypeError):  # a take kept without its words: it has no captions
        return []
