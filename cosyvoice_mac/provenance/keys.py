"""Who signs the content credentials: this install's own key, made on first use, or an organisation's certificate.

This install's identity is a root certificate and a signing certificate issued by it, both P-256 (ES256): C2PA
refuses a self-signed signing certificate, so the signer is an end entity with a chain above it. The root's
private key is dropped as soon as the signing certificate is issued, so nothing can ever issue another
certificate in its name. The signing key and the chain are kept in one PEM file, readable by the user alone
(0600, in a 0700 folder), in the user cache folder's ``content-credentials/`` (``paths.user_cache_dir``).
Nobody else trusts that root: a reader elsewhere sees a valid signature by an unknown signer, and ``verify`` on
this machine recognises its own root.

An organisation signs with its own chain instead (``COSYVOICE_SIGNING_CERT`` and ``COSYVOICE_SIGNING_KEY``,
``settings/credentials.py``): a certificate from a certification authority that C2PA readers trust.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.paths import atomic_write, user_cache_dir
from cosyvoice_mac.settings import env_value, setting

IDENTITY_FOLDER = "content-credentials"
IDENTITY_FILE = "signing-identity.pem"  # the signing key, then the chain (signing certificate first, root last)
VALID_DAYS = 3650
RENEW_BEFORE = datetime.timedelta(days=1)  # a certificate this close to its end is replaced before signing
SUBJECT = "cosyvoice-mac on this computer"
ROOT_SUBJECT = "cosyvoice-mac local root"
ORGANISATION = "cosyvoice-mac (self-signed, not a trusted authority)"
_CERT_MARK = b"-----BEGIN CERTIFICATE-----"


class CredentialsError(CosyVoiceError):
    """Content credentials cannot be signed as configured (a certificate or key unreadable, or not a pair)."""


@dataclass(frozen=True)
class SigningIdentity:
    """A private key and its certificate chain, in PEM, as c2pa's signer takes them. ``algorithm`` is c2pa's
    name for the signature (es256, es384, es512, ps256, ed25519); ``source``: "install" or "organisation"."""

    key_pem: bytes
    chain_pem: bytes  # the signing certificate first, then its issuers
    algorithm: str
    source: str

    @property
    def certificates(self) -> list[bytes]:
        return split_certificates(self.chain_pem)

    @property
    def root_pem(self) -> bytes:
        """The last certificate of the chain: for this install's identity, its own root."""
        return self.certificates[-1]


def identity_folder() -> Path:
    return user_cache_dir() / IDENTITY_FOLDER


def signing_identity() -> SigningIdentity:
    """The organisation's identity where its variables are set, else this install's (made on first use)."""
    cert, key = env_value("signing_cert"), env_value("signing_key")
    if cert or key:
        return organisation_identity(cert, key)
    return install_identity()


def install_identity(folder: Path | None = None) -> SigningIdentity:
    """This install's identity from ``folder`` (default :func:`identity_folder`), made there when there is none
    yet, or when the one there is unreadable or about to expire. Two processes making it at once agree: the
    first file written wins and the other process reads it."""
    folder = identity_folder() if folder is None else Path(folder)
    path = folder / IDENTITY_FILE
    existing = _read_install_identity(path)
    if existing is not None:
        return existing
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    key_pem, chain_pem = _make_install_identity()
    try:
        atomic_write(path, key_pem + chain_pem, replace=path.exists(), mode=0o600)
    except FileExistsError:  # another process made it first: use that one
        winner = _read_install_identity(path)
        if winner is not None:
            return winner
        raise
    return SigningIdentity(key_pem, chain_pem, "es256", "install")


def organisation_identity(cert: str | None, key: str | None) -> SigningIdentity:
    """The chain in the file ``cert`` and its private key in the file ``key`` (both PEM), checked as a pair."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    if not cert or not key:
        missing = setting("signing_key" if cert else "signing_cert").env
        raise CredentialsError(f"an organisation's certificate needs both its chain and its key: set {missing} too")
    chain_pem, key_pem = _read(cert, "certificate chain"), _read(key, "private key")
    certificates = split_certificates(chain_pem)
    if not certificates:
        raise CredentialsError(f"{Path(cert).name} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    try:
        private_key = serialization.load_pem_private_key(key_pem, password=None)
        leaf = x509.load_pem_x509_certificate(certificates[0])
    except (ValueError, TypeError) as error:
        raise CredentialsError(
            f"{Path(key).name} or {Path(cert).name} cannot be read as an unencrypted PEM key and certificate ({error})"
        ) from None
    if _public_bytes(private_key.public_key()) != _public_bytes(leaf.public_key()):
        raise CredentialsError(
            f"the key in {Path(key).name} does not belong to the first certificate of {Path(cert).name} "
            "(the chain starts with the signing certificate)"
        )
    return SigningIdentity(key_pem, chain_pem, _algorithm(private_key), "organisation")


def _read(name: str, what: str) -> bytes:
    try:
        return Path(name).expanduser().read_bytes()
    except OSError as error:
        raise CredentialsError(f"the {what} for content credentials, {name}, cannot be read ({error.strerror})")


def _read_install_identity(path: Path) -> SigningIdentity | None:
    """The identity kept at ``path``; None when there is none, it cannot be read, or it is about to expire."""
    from cryptography import x509

    try:
        data = path.read_bytes()
        start = data.index(_CERT_MARK)
        key_pem, chain_pem = data[:start], data[start:]
        leaf = x509.load_pem_x509_certificate(split_certificates(chain_pem)[0])
    except (OSError, ValueError, IndexError):
        return None
    if leaf.not_valid_after_utc - RENEW_BEFORE < datetime.datetime.now(datetime.timezone.utc):
        return None
    return SigningIdentity(key_pem, chain_pem, "es256", "install")


def _make_install_identity() -> tuple[bytes, bytes]:
    """(signing key PEM, chain PEM): a fresh root and a signing certificate it issued; the root's key is dropped."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def name(common: str) -> x509.Name:
        return x509.Name(
            [
                x509.NameAttribute(NameOID.COMMON_NAME, common),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANISATION),
            ]
        )

    def usage(sign_certificates: bool) -> x509.KeyUsage:
        return x509.KeyUsage(
            digital_signature=not sign_certificates,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=sign_certificates,
            crl_sign=sign_certificates,
            encipher_only=False,
            decipher_only=False,
        )

    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=VALID_DAYS)
    root_key, signing_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    root = (
        x509.CertificateBuilder()
        .subject_name(name(ROOT_SUBJECT))
        .issuer_name(name(ROOT_SUBJECT))
        .public_key(root_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage(sign_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(root_key.public_key()), critical=False)
        .sign(root_key, hashes.SHA256())
    )
    signing = (
        x509.CertificateBuilder()
        .subject_name(name(SUBJECT))
        .issuer_name(root.subject)
        .public_key(signing_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage(sign_certificates=False), critical=True)
        # C2PA accepts a signing certificate for e-mail protection or document signing; cryptography names the first
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.EMAIL_PROTECTION]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(signing_key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(root_key.public_key()), critical=False)
        .sign(root_key, hashes.SHA256())
    )
    key_pem = signing_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    chain_pem = signing.public_bytes(serialization.Encoding.PEM) + root.public_bytes(serialization.Encoding.PEM)
    return key_pem, chain_pem


def split_certificates(chain_pem: bytes) -> list[bytes]:
    """The PEM certificates of ``chain_pem``, in order."""
    return [_CERT_MARK + part for part in chain_pem.split(_CERT_MARK)[1:]]


def _public_bytes(public_key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _algorithm(private_key) -> str:
    """c2pa's signature algorithm for ``private_key``'s kind."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    if isinstance(private_key, ed25519.Ed25519PrivateKey):
        return "ed25519"
    if isinstance(private_key, rsa.RSAPrivateKey):
        return "ps256"
    if isinstance(private_key, ec.EllipticCurvePrivateKey):
        by_curve = {"secp256r1": "es256", "secp384r1": "es384", "secp521r1": "es512"}
        if private_key.curve.name in by_curve:
            return by_curve[private_key.curve.name]
    raise CredentialsError(
        "content credentials are signed with an EC P-256/384/521, Ed25519 or RSA key; this key is of another kind"
    )
