"""The check every door's test makes of an output's content credentials, read with c2pa-python's own Reader
(not the app's ``verify``): a valid signature over the file as it is, and the claim that it is AI-generated."""

from __future__ import annotations

import io

TRAINED_ALGORITHMIC_MEDIA = "http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia"
MEDIA_TYPES = {"wav": "audio/wav", "flac": "audio/flac", "mp3": "audio/mpeg"}
# this install's own root is trusted nowhere else: the one failure a self-signed chain brings
UNTRUSTED_ONLY = {"signingCredential.untrusted"}


def ai_credentials(data: bytes, kind: str) -> dict:
    """The active manifest of ``data`` (a whole ``kind`` file: wav, flac or mp3), after asserting that its
    signature and hash hold and that it claims to be made by a trained model; its assertions by label."""
    import c2pa

    with c2pa.Reader(MEDIA_TYPES[kind], io.BytesIO(data)) as reader:
        state, results, manifest = (
            reader.get_validation_state(),
            reader.get_validation_results(),
            reader.get_active_manifest(),
        )
    failures = {item["code"] for item in results["activeManifest"].get("failure", [])}
    successes = {item["code"] for item in results["activeManifest"].get("success", [])}
    assert state in ("Valid", "Trusted") and failures <= UNTRUSTED_ONLY, (state, failures)
    assert {"claimSignature.validated", "assertion.dataHash.match"} <= successes, successes
    assertions = {item["label"]: item["data"] for item in manifest["assertions"]}
    created = [action for action in assertions["c2pa.actions.v2"]["actions"] if action["action"] == "c2pa.created"]
    assert created and created[0]["digitalSourceType"] == TRAINED_ALGORITHMIC_MEDIA, created
    return assertions
