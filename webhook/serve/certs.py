"""Development CA and serving certificate for the webhook, built with `cryptography`.

In a cluster cert-manager issues the serving certificate (deploy/); this module is for local runs,
kind clusters and tests. The certificates are shaped so that the strictest clients accept them:
Go's x509 (the API server: SANs only, CN ignored) and OpenSSL's X509_STRICT mode, which Python 3.13
turns on by default (CA: critical BasicConstraints, keyCertSign, SKI; leaf: AKI, EKU serverAuth).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.serve import CA_MIN_DAYS

__all__ = [
    "CertPaths",
    "CertError",
    "ca_bundle_b64",
    "generate",
    "issue_serving_cert",
    "load_ca",
    "new_ca",
    "parse_san",
    "serving_sans",
]

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"

#: The CA outlives its leaves so `generate(..., reuse_ca=True)` can re-issue without a new caBundle
#: (CA_MIN_DAYS, from webhook.serve). Backdating absorbs clock skew between the machine that signs and
#: the ones that verify.
_BACKDATE = dt.timedelta(minutes=5)
_DNS_NAME = re.compile(
    r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"
)

SanValue = x509.DNSName | x509.IPAddress
CAKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class CertError(ValueError):
    """A certificate request that cannot be honoured (bad name, missing CA files...)."""


@dataclass(frozen=True)
class CertPaths:
    """Where `generate` wrote each file (the layout of a cert-manager `kubernetes.io/tls` Secret)."""

    ca_crt: Path
    ca_key: Path
    tls_crt: Path
    tls_key: Path

    @property
    def all(self) -> tuple[Path, Path, Path, Path]:
        return (self.ca_crt, self.ca_key, self.tls_crt, self.tls_key)


def parse_san(value: str) -> SanValue:
    """Turn `--san` text into a SAN entry: an IP literal becomes an IPAddress, anything else a DNSName."""
    text = value.strip()
    try:
        return x509.IPAddress(ipaddress.ip_address(text))
    except ValueError:
        pass
    name = text.lower().rstrip(".")
    if len(name) > 253 or not _DNS_NAME.match(name):
        raise CertError(f"{value!r} is neither an IP address nor a valid DNS name")
    return x509.DNSName(name)


def serving_sans(service: str, namespace: str, extra_sans: Iterable[str] = ()) -> list[SanValue]:
    """SANs the API server (`<svc>.<ns>.svc`) and local clients (`localhost`, loopback IPs) verify against."""
    for label, what in ((service, "service"), (namespace, "namespace")):
        if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", label):
            raise CertError(f"{what} name {label!r} is not a DNS-1123 label (lowercase, digits, '-')")
    base = [
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        "localhost",
        "127.0.0.1",
        "::1",
    ]
    sans: list[SanValue] = []
    for text in [*base, *extra_sans]:
        san = parse_san(text)
        if san not in sans:
            sans.append(san)
    return sans


def new_ca(
    common_name: str = "dra-webhook dev CA", days: int = CA_MIN_DAYS
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed ECDSA P-256 CA that passes X509_STRICT (critical BasicConstraints, keyCertSign, SKI)."""
    _check_days(days)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dra-migration-webhook"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64]),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def issue_serving_cert(
    ca_cert: x509.Certificate,
    ca_key: CAKey,
    sans: list[SanValue],
    days: int = 365,
    common_name: str | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A leaf for TLS servers signed by `ca_cert`: SANs, SKI + AKI, EKU serverAuth, never past the CA."""
    _check_days(days)
    if not sans:
        raise CertError("a serving certificate needs at least one SAN (clients ignore the CN)")
    key = ec.generate_private_key(ec.SECP256R1())
    cn = common_name or next((s.value for s in sans if isinstance(s, x509.DNSName)), "dra-webhook")
    now = dt.datetime.now(dt.UTC)
    not_after = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    try:
        ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski)
    except x509.ExtensionNotFound:  # a CA made elsewhere without SKI: derive the id from its key
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn[:64])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(aki, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def generate(
    out_dir: str | os.PathLike[str],
    service: str = "dra-webhook",
    namespace: str = "dra-webhook",
    days: int = 365,
    extra_sans: Iterable[str] = (),
    *,
    reuse_ca: bool = False,
) -> CertPaths:
    """Write `ca.crt`, `ca.key`, `tls.crt`, `tls.key` into `out_dir`, replacing existing files.

    Each file is replaced atomically (temp file + rename), so a server reloading from the same
    directory never reads half a file; keys are 0600. With `reuse_ca` the existing `ca.crt`/`ca.key`
    sign a fresh leaf, so the caBundle already installed in the webhook configuration stays valid.
    """
    out = Path(out_dir)
    paths = CertPaths(out / CA_CERT, out / CA_KEY, out / TLS_CERT, out / TLS_KEY)
    sans = serving_sans(service, namespace, extra_sans)
    if reuse_ca:
        ca_cert, ca_key = load_ca(paths.ca_crt, paths.ca_key)
    else:
        ca_cert, ca_key = new_ca(f"{service} dev CA", days=max(days, CA_MIN_DAYS))
    cn = _short_cn(service, namespace)
    cert, key = issue_serving_cert(ca_cert, ca_key, sans, days=days, common_name=cn)
    out.mkdir(parents=True, exist_ok=True)
    if not reuse_ca:
        _write_atomic(paths.ca_key, _key_pem(ca_key), 0o600)
        _write_atomic(paths.ca_crt, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    # Key before certificate: a reader that sees the new tls.crt finds its key already in place.
    _write_atomic(paths.tls_key, _key_pem(key), 0o600)
    _write_atomic(paths.tls_crt, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return paths


def load_ca(
    ca_crt: str | os.PathLike[str], ca_key: str | os.PathLike[str]
) -> tuple[x509.Certificate, CAKey]:
    """Read a CA written by `generate`; a clear CertError if it is missing or not a CA."""
    try:
        cert = x509.load_pem_x509_certificate(Path(ca_crt).read_bytes())
        key = serialization.load_pem_private_key(Path(ca_key).read_bytes(), password=None)
    except FileNotFoundError as e:
        raise CertError(f"cannot reuse the CA: {e.filename} does not exist (run without --reuse-ca)") from e
    except ValueError as e:
        raise CertError(f"cannot reuse the CA in {ca_crt} / {ca_key}: {e}") from e
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertError(f"{ca_key} is not an ECDSA or RSA key")
    if _spki(key.public_key()) != _spki(cert.public_key()):
        raise CertError(f"{ca_key} does not belong to {ca_crt}")
    try:
        if not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            raise CertError(f"{ca_crt} is not a CA certificate")
    except x509.ExtensionNotFound as e:
        raise CertError(f"{ca_crt} is not a CA certificate (no BasicConstraints)") from e
    return cert, key


def ca_bundle_b64(path: str | os.PathLike[str]) -> str:
    """Standard base64 of the PEM file, the form `webhooks[].clientConfig.caBundle` takes in YAML."""
    return base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _short_cn(service: str, namespace: str) -> str:
    # Clients ignore the CN; keep it readable and within the 64-char X.520 limit.
    cn = f"{service}.{namespace}.svc"
    return cn if len(cn) <= 64 else service


def _check_days(days: int) -> None:
    if days < 1:
        raise CertError(f"validity must be at least 1 day, got {days}")


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,  # ECDSA keys sign; they never encipher
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _spki(key: CertificatePublicKeyTypes) -> bytes:
    """A public key in one comparable form, whatever its algorithm."""
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _key_pem(key: CAKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # created 0600
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
