"""Reading a file's content credentials back: what they say, and whether their signature and hash still hold.

c2pa's Reader checks the manifest: the claim's signature (``claimSignature.*``), the hash of the file's
bytes outside the manifest (``assertion.dataHash.*``), and the signer's certificate against a trust list
(``signingCredential.*``). This module sorts its findings into one verdict a user can read
(:attr:`Credentials.verdict`) and gives this machine's own root as a trust anchor, so a file this install
signed reads as signed here; a file from another machine's install reads as validly signed by a signer
this machine does not know, which is what it is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from cosyvoice_mac.provenance.claim import ACTIONS_LABEL, CREATED, GENERATION_LABEL, TRAINED_ALGORITHMIC_MEDIA
from cosyvoice_mac.provenance.keys import IDENTITY_FILE, identity_folder, split_certificates
from cosyvoice_mac.provenance.sign import MEDIA_TYPES

VALID, CHANGED, BAD_SIGNATURE, NONE, UNREADABLE = "valid", "changed", "bad signature", "none", "unreadable"
UNTRUSTED = "signingCredential.untrusted"
TRUSTED = "signingCredential.trusted"
# a failure with one of these codes means bytes were changed after signing: the audio (its hash) or the claim
_CHANGED_CODES = (
    "assertion.dataHash.",
    "assertion.bmffHash.",
    "assertion.boxesHash.",
    "assertion.hashedURI.",
    "claimSignature.mismatch",
)


@dataclass(frozen=True)
class Credentials:
    """What one file's content credentials say. ``verdict``: VALID (signature and hash hold), CHANGED (the
    file was changed after signing), BAD_SIGNATURE, NONE (the file carries none) or UNREADABLE (not a file
    c2pa reads). ``trusted``: the signer's certificate chains to a root this machine trusts (this install's
    own); ``problems``: the reader's failures in its words."""

    file: str
    verdict: str
    ai_generated: bool = False
    source_type: str | None = None
    signer: str | None = None
    issuer: str | None = None
    trusted: bool = False
    signed_at: str | None = None
    software: str | None = None
    generation: dict = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    @property
    def holds(self) -> bool:
        return self.verdict == VALID

    def as_dict(self) -> dict:
        return {**asdict(self), "holds": self.holds}

    def lines(self) -> list[str]:
        """The credentials in a few lines for a person (the CLI's ``verify``, the page's history)."""
        if self.verdict == NONE:
            return [f"{self.file}: no content credentials (made without them, or re-encoded since)"]
        if self.verdict == UNREADABLE:
            return [f"{self.file}: the content credentials cannot be read: {'; '.join(self.problems)}"]
        head = {
            VALID: "content credentials valid: signature and hash hold (the file is as it was signed)",
            CHANGED: "CHANGED after signing: the file no longer matches its content credentials",
            BAD_SIGNATURE: "content credentials NOT valid: the signing certificate does not hold",
        }[self.verdict]
        who = f"{self.signer or 'unknown'}" + (f" ({self.issuer})" if self.issuer else "")
        trust = "a root this computer trusts (this install's own)" if self.trusted else "a root not trusted here"
        lines = [f"{self.file}: {head}", f"  signed by: {who}, certified by {trust}"]
        source = f"IPTC {self.source_type.rsplit('/', 1)[-1]}" if self.source_type else "no digital source type"
        lines.append(f"  AI-generated: {'yes' if self.ai_generated else 'not claimed'} ({source})")
        made = {"software": self.software, **self.generation}
        lines += [f"  {key}: {value}" for key, value in made.items() if value not in (None, "")]
        lines += [f"  problem: {problem}" for problem in self.problems]
        return lines


def read_credentials(path: str | Path, anchors_pem: bytes | None = None) -> Credentials:
    """The content credentials of the file at ``path``, checked against ``anchors_pem`` (PEM roots to trust;
    default: this install's own root, when it has made one)."""
    import c2pa

    path = Path(path)
    anchors = _install_root() if anchors_pem is None else anchors_pem
    settings = {"verify": {"verify_trust": True}}
    if anchors:
        settings["trust"] = {"user_anchors": anchors.decode("ascii")}
    try:
        with path.open("rb") as file, c2pa.Context.from_dict(settings) as context:
            reader = c2pa.Reader.try_create(_media_type(path), file, None, context)
            if reader is None:
                return Credentials(path.name, NONE)
            with reader:
                manifest = reader.get_active_manifest() or {}
                results = reader.get_validation_results() or {}
    except OSError as error:
        return Credentials(path.name, UNREADABLE, problems=(error.strerror or str(error),))
    except _damaged_credentials(c2pa) as error:  # credentials damaged past reading: the file was changed too
        return Credentials(path.name, CHANGED, problems=(str(error),))
    except c2pa.C2paError as error:  # not a container c2pa reads (not audio, a torn header)
        return Credentials(path.name, UNREADABLE, problems=(str(error),))
    return _credentials(path.name, manifest, results)


def _damaged_credentials(c2pa) -> tuple[type, ...]:
    """c2pa's errors for credentials that are there but cannot be read whole (a changed byte in their boxes)."""
    found = c2pa.C2paError
    return (found.Verify, found.Signature, found.Manifest, found.Json, found.Decoding, found.Assertion)


def _credentials(name: str, manifest: dict, results: dict) -> Credentials:
    active = results.get("activeManifest") or {}
    failures = [item for item in active.get("failure") or [] if item.get("code") != UNTRUSTED]
    codes = [item.get("code", "") for item in failures]
    if any(code.startswith(_CHANGED_CODES) for code in codes):
        verdict = CHANGED
    elif codes:
        verdict = BAD_SIGNATURE
    else:
        verdict = VALID
    assertions = {item.get("label"): item.get("data") or {} for item in manifest.get("assertions") or []}
    created = [a for a in assertions.get(ACTIONS_LABEL, {}).get("actions") or [] if a.get("action") == CREATED]
    source_type = created[0].get("digitalSourceType") if created else None
    signature = manifest.get("signature_info") or {}
    agent = (manifest.get("claim_generator_info") or [{}])[0]
    return Credentials(
        file=name,
        verdict=verdict,
        ai_generated=source_type == TRAINED_ALGORITHMIC_MEDIA,
        source_type=source_type,
        signer=signature.get("common_name"),
        issuer=signature.get("issuer"),
        trusted=any(item.get("code") == TRUSTED for item in active.get("success") or []),
        signed_at=signature.get("time"),
        software=" ".join(str(agent[key]) for key in ("name", "version") if agent.get(key)) or None,
        generation=dict(assertions.get(GENERATION_LABEL, {})),
        problems=tuple(f"{item.get('code')}: {item.get('explanation', '')}" for item in failures),
    )


def _media_type(path: Path) -> str:
    return MEDIA_TYPES.get(path.suffix.lower().lstrip("."), "")


def _install_root() -> bytes | None:
    """This install's root certificate, when it has made its identity (reading never makes one)."""
    try:
        data = (identity_folder() / IDENTITY_FILE).read_bytes()
    except OSError:
        return None
    certificates = split_certificates(data)
    return certificates[-1] if certificates else None
