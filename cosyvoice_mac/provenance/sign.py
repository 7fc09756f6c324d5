"""Signing content credentials into an output's bytes, the one step every door's writer takes before it writes.

C2PA embeds the signed manifest in the container beside the audio (a ``C2PA`` chunk after a WAV's data, a
metadata block in FLAC, an ID3 frame in MP3): the audio data itself is not touched, so every player plays the
file as before and decodes the same samples. The manifest carries a hash of the rest of the file, so any later
change to the audio shows in ``verify``.

Signing is on unless ``COSYVOICE_CONTENT_CREDENTIALS`` is 0. When it fails (an organisation's certificate
unreadable, a disk that refuses the first key), the output is written unsigned all the same and the reason is
handed back for the job's notes: the audio is never lost to its credentials.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping

from cosyvoice_mac.provenance.claim import manifest_definition
from cosyvoice_mac.provenance.keys import CredentialsError, SigningIdentity, signing_identity
from cosyvoice_mac.settings import env_flag

# the containers C2PA signs that this app writes: file suffix (or the API's response_format) -> media type
MEDIA_TYPES = {"wav": "audio/wav", "flac": "audio/flac", "mp3": "audio/mpeg"}
log = logging.getLogger(__name__)


def credentials_on() -> bool:
    """Whether outputs are signed (the ``content_credentials`` setting: on unless set to 0)."""
    return bool(env_flag("content_credentials"))


def sign_audio(
    data: bytes,
    media_type: str,
    facts: Mapping,
    title: str,
    when: str | None = None,
    identity: SigningIdentity | None = None,
) -> bytes:
    """``data`` (a whole WAV, FLAC or MP3 file of ``media_type``, called ``title``) with content credentials
    signed in by ``identity`` (default: :func:`keys.signing_identity`), saying what ``facts`` record of it and
    that it was made ``when`` (ISO 8601; default now). CredentialsError when it cannot be signed."""
    import c2pa

    identity = identity or signing_identity()
    definition = manifest_definition(facts, title, media_type, when)
    try:
        info = c2pa.C2paSignerInfo(identity.algorithm, identity.chain_pem, identity.key_pem, None)
        with c2pa.Signer.from_info(info) as signer, c2pa.Builder(definition) as builder:
            signed = io.BytesIO()
            builder.sign(signer, media_type, io.BytesIO(data), signed)
    except c2pa.C2paError as error:
        raise CredentialsError(f"content credentials could not be signed into {title}: {error}") from None
    return signed.getvalue()


def with_credentials(
    data: bytes, media_type: str, facts: Mapping, title: str, when: str | None = None
) -> tuple[bytes, str | None]:
    """What a writer saves: ``data`` signed (:func:`sign_audio`) when credentials are on, as it is when they
    are off; and when signing fails, as it is with the reason (None when nothing went wrong)."""
    if not credentials_on():
        return data, None
    try:
        return sign_audio(data, media_type, facts, title, when), None
    except (CredentialsError, OSError) as error:
        reason = f"saved without content credentials: {error}"
        log.warning(reason)
        return data, reason
