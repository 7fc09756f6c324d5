"""Content credentials (C2PA) on every output: the claim that the audio is AI-generated, which model, version
and engine made it, when, and the hash of the voice, signed into the WAV, FLAC or MP3 file itself.

``sign`` signs a file's bytes before a writer writes them (every door's writer calls
:func:`with_credentials`); ``keys`` owns who signs (this install's own key, made on first use, or an
organisation's certificate); ``claim`` says what the credentials state; ``verify`` reads them back
(``cosyvoice-mac verify FILE``). Torch-free, on the floor of ``sound``: it imports only ``errors``, ``paths``,
``settings`` and the package's version; c2pa and cryptography load on first use.
"""

from cosyvoice_mac.provenance.keys import CredentialsError, SigningIdentity, signing_identity
from cosyvoice_mac.provenance.sign import MEDIA_TYPES, credentials_on, sign_audio, with_credentials
from cosyvoice_mac.provenance.verify import Credentials, read_credentials

__all__ = [
    "MEDIA_TYPES",
    "Credentials",
    "CredentialsError",
    "SigningIdentity",
    "credentials_on",
    "read_credentials",
    "sign_audio",
    "signing_identity",
    "with_credentials",
]
