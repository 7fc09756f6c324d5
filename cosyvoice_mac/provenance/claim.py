"""What an output's content credentials say, as a C2PA manifest definition (plain JSON data for c2pa's Builder).

The claim is the one Article 50(2) of the EU AI Act asks for, in the form C2PA readers know: a ``c2pa.created``
action whose digital source type is IPTC's ``trainedAlgorithmicMedia`` (made by a trained model), by this app
(its name and version as the software agent) at a time. Beside it, this app's own assertion
(:data:`GENERATION_LABEL`) names the model, its version, the engine and the hash of the voice
(``prompt_hash``: the hash of the prompt recording's samples, never the recording or its transcript). The
spoken text is left out on purpose: a file travels further than its sidecar, and the text may be private.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from cosyvoice_mac import __version__

SOFTWARE = "cosyvoice-mac"
TRAINED_ALGORITHMIC_MEDIA = "http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia"
CREATED = "c2pa.created"
ACTIONS_LABEL = "c2pa.actions.v2"
GENERATION_LABEL = "org.cosyvoice-mac.generation"
# facts key -> the generation assertion's key (what a job's or a long job's sidecar records)
GENERATION_FACTS = {
    "model": "model",
    "version": "model_version",
    "engine": "engine",
    "prompt_hash": "voice_hash",
    "mode": "mode",
    "kind": "long_form_kind",
    "source_hash": "converted_recording_hash",  # a voice conversion's recording (its samples' hash)
    "interface": "interface",
}


def utc_time(seconds: float | None = None) -> str:
    """``seconds`` since the epoch (default: now) as ISO 8601 in UTC, as C2PA's ``when`` is written."""
    moment = datetime.datetime.now(datetime.timezone.utc) if seconds is None else None
    moment = moment or datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.isoformat(timespec="seconds")


def manifest_definition(facts: Mapping, title: str, media_type: str, when: str | None = None) -> dict:
    """The manifest for an output called ``title`` of ``media_type`` whose sidecar records ``facts``, made
    ``when`` (ISO 8601; default now, in UTC). Facts that are missing or empty are left out, never guessed."""
    when = when or utc_time()
    agent = {"name": SOFTWARE, "version": __version__}
    generation = {
        ours: facts[key] for key, ours in GENERATION_FACTS.items() if isinstance(facts.get(key), (str, int, float))
    }
    generation = {key: value for key, value in generation.items() if value != ""}
    voices = [value for value in facts.get("voice_hashes") or () if isinstance(value, str)]
    if voices:  # a long job's lines: each voice's hash
        generation["voice_hashes"] = voices
    created = {
        "action": CREATED,
        "digitalSourceType": TRAINED_ALGORITHMIC_MEDIA,
        "softwareAgent": agent,
        "when": when,
        "description": "speech made by a neural speech model (CosyVoice), not recorded from a person",
    }
    return {
        "claim_generator_info": [agent],
        "title": title,
        "format": media_type,
        "assertions": [
            {"label": ACTIONS_LABEL, "data": {"actions": [created]}},
            {"label": GENERATION_LABEL, "data": {**generation, "created": when}},
        ],
    }
