"""A long job's lines as spoken, and "retake these": the lines the take check left flagged made again in one action.

Every line a job speaks goes through ``LineTakes``, which records its take: the line's number and request, the seed,
the check's verdict and the WAV the engine saved for it in outputs/ (a checked dialogue's and dub's records are
written beside the result as ``<stem>.lines.json``; a batch's are its lines' sidecars). A retake (``Retake``) runs
the job again with an earlier run's records: each line it does not retake is its earlier take, read back from that
WAV (not spoken again), and each line it retakes is spoken with the next seed. Nothing is removed: the earlier takes
stay in outputs/ and the new take's record lists them (``earlier_takes``), as does its sidecar in a batch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from cosyvoice_mac.engine.sidecar import read_sidecar
from cosyvoice_mac.longform import LongformError
from cosyvoice_mac.longform.lines import LineRequest, Spoken
from cosyvoice_mac.pipeline.takes import FLAGGED
from cosyvoice_mac.pipeline.takes.captions import SUFFIXES
from cosyvoice_mac.pipeline.takes.retake import next_seed
from cosyvoice_mac.sound.wav import read_samples

LINES_SUFFIX = ".lines.json"  # beside a dialogue's or a dub's WAV: its lines' takes


@dataclass(frozen=True)
class Retake:
    """Which lines of an earlier run to make again (``numbers``), and that run's records of its lines (``result``:
    the name of the WAV they were joined into, as the run's ``.lines.json`` says)."""

    earlier: tuple[dict, ...]
    numbers: frozenset[int]
    result: str | None = None

    @classmethod
    def flagged_of(cls, result: str | Path) -> "Retake":
        """The lines the check left flagged in the dialogue or dub saved at ``result`` (its WAV, or its
        ``.lines.json``); LongformError when it has no record of its lines or none was flagged."""
        path = Path(result)
        path = path if path.name.endswith(LINES_SUFFIX) else path.with_suffix(LINES_SUFFIX)
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
            records, result = list(recorded["lines"]), recorded.get("result")
        except (OSError, ValueError, KeyError, TypeError):
            raise LongformError(
                f"{path} cannot be read: a dialogue or dub keeps its lines' takes there, beside its WAV"
            ) from None
        numbers = _flagged_numbers(records)
        if not numbers:
            raise LongformError(f"no line of {path.name} was flagged by the take check: there is nothing to retake")
        return cls(tuple(records), frozenset(numbers), result)

    @classmethod
    def flagged_in_batch(cls, folder: Path, items) -> "Retake":
        """The lines of a batch (``items``, ``batch.BatchItem``) whose WAV in ``folder`` the check left flagged,
        from their sidecars; a batch with none flagged retakes nothing. Only those are records: the batch's resume
        decides the rest (a line whose settings changed is made again, never reused)."""
        records = []
        for item in items:
            sidecar = read_sidecar((Path(folder) / item.file).with_suffix(".json"))
            facts = sidecar.recorded if sidecar is not None else {}
            if facts.get("line") == item.number and facts.get("check") == FLAGGED:
                records.append(_record(item.number, item.text, facts.get("voice"), item.instruct, 1.0, facts))
        return cls(tuple(records), frozenset(_flagged_numbers(records)))


class LineTakes:
    """Owns one job's record of its lines' takes (``records``), in the order they were spoken; speaks through
    ``speak`` (the job's ``runner.Speak``), or, for a ``retake`` run, reuses the earlier takes it does not retake."""

    def __init__(self, speak, retake: Retake | None = None):
        self.speak, self.records = speak, []
        self._earlier = {_key(record): record for record in (retake.earlier if retake else ())}
        self._retaking = retake.numbers if retake else frozenset()
        self._seeds: dict[int, int] = {}  # a retaken line's new seed (a dub may speak a cue twice, faster)
        self._before: dict[int, list[str]] = {}  # a retaken line's earlier takes

    @property
    def retaken(self) -> list[int]:
        """The numbers of the lines made again, in order."""
        return list(self._seeds)

    def prepare(self, voices) -> None:
        self.speak.prepare(voices)

    def __getattr__(self, name: str):
        return getattr(self.speak, name)  # the rest of the job's Speak (EngineSpeak's stop, notes, glossary)

    def ahead(self, lines) -> None:
        """The lines the job will ask for next, as ``speak`` will be asked for them (``EngineSpeak.ahead`` sends
        them to the engine in batches): a line this run reuses is left out, a retaken one carries its new seed."""
        tell = getattr(self.speak, "ahead", None)
        if tell is None:
            return
        asked = []
        for line in lines:
            earlier = self._earlier.get(_key_of(line))
            if earlier is not None and line.number in self._retaking:
                asked.append(replace(line, seed=self._seeds.get(line.number, next_seed(int(earlier.get("seed") or 0)))))
            elif earlier is None:
                asked.append(line)
        tell(asked)

    def __call__(self, line: LineRequest) -> Spoken:
        earlier = self._earlier.get(_key_of(line))
        if line.number in self._seeds or (earlier is not None and line.number in self._retaking):
            if line.number not in self._seeds:
                self._seeds[line.number] = next_seed(int(earlier.get("seed") or 0))
                made = [earlier["output"]] if earlier.get("output") else []  # none: that take was not saved
                self._before[line.number] = [*earlier.get("earlier_takes", []), *made]
            spoken = self.speak(replace(line, seed=self._seeds[line.number]))
            spoken = replace(spoken, facts={**spoken.facts, "earlier_takes": self._before[line.number]})
        else:
            spoken = (_read_back(earlier) if earlier is not None else None) or self.speak(line)
        self.records.append(_record(line.number, line.text, line.voice, line.instruct, line.speed, spoken.facts))
        return spoken

    def companion(self, out_stem: Path) -> dict[Path, dict]:
        """``<out_stem>.lines.json``, the record beside the result ``<out_stem>.wav``, when a line was checked (an
        unchecked job has nothing to retake: none)."""
        if all(record["check"] is None for record in self.records):
            return {}
        record = {"result": out_stem.with_suffix(".wav").name, "lines": self.records}
        return {out_stem.with_suffix(LINES_SUFFIX): record}


def _record(number, text: str, voice, instruct, speed: float, facts: dict) -> dict:
    return {
        "number": number,
        "text": text,
        "voice": voice,
        "instruct": instruct,
        "speed": speed,
        "seed": facts.get("seed"),
        "check": facts.get("check"),
        "check_notes": facts.get("check_notes") or [],
        "output": facts.get("line_output"),
        "earlier_takes": facts.get("earlier_takes") or [],
    }


def _flagged_numbers(records: list[dict]) -> set[int]:
    last = {record["number"]: record for record in records}  # a dub's cue spoken twice: its last take counts
    return {number for number, record in last.items() if record.get("check") == FLAGGED}


def _key(record: dict) -> tuple:
    return (record.get("number"), record.get("text"), record.get("voice"), record.get("instruct"), record.get("speed"))


def _key_of(line: LineRequest) -> tuple:
    return (line.number, line.text, line.voice, line.instruct, line.speed)


def _read_back(record: dict) -> Spoken | None:
    """An earlier line's take as it was spoken, from the WAV the engine saved (None: it is gone, so it is spoken
    again)."""
    wav = Path(record.get("output") or "")
    sidecar = read_sidecar(wav.with_suffix(".json")) if record.get("output") else None
    if sidecar is None or sidecar.sample_rate is None or not wav.is_file():
        return None
    try:
        words = json.loads(wav.with_suffix(SUFFIXES["json"]).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # not timed (the check was off): no captions for this line
        words = None
    facts = {
        "seed": record.get("seed"),
        "line_output": str(wav),
        "check": record.get("check"),
        "check_notes": record.get("check_notes") or [],
        "earlier_takes": record.get("earlier_takes") or [],
        "reused": True,
    }
    return Spoken(read_samples(wav), sidecar.sample_rate, facts, words)
