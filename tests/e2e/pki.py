"""Certificates and kubeconfigs of the throw-away control plane (built with `cryptography`).

One CA signs the API server's serving certificate and the client certificates of the admin (group
``system:masters``), the scheduler and the controller-manager; an RSA key signs ServiceAccount tokens.
The webhook's own serving certificate comes from ``webhook.serve.certs`` (the code users run), not from here.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.serve.certs import new_ca

_PEM = serialization.Encoding.PEM


def _key_pem(key: Any) -> bytes:
    return key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


class PKI:
    """A CA in ``directory`` that issues the control plane's serving and client certificates."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ca_cert, self.ca_key = new_ca("dra-webhook e2e control-plane CA", days=30)
        self.ca = _write(directory / "ca.crt", self.ca_cert.public_bytes(_PEM), 0o644)
        _write(directory / "ca.key", _key_pem(self.ca_key))
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key = _write(directory / "sa.key", sa.private_bytes(
            _PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()))
        self.sa_pub = _write(directory / "sa.pub", sa.public_key().public_bytes(
            _PEM, serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)

    def issue(self, name: str, cn: str, *, org: str | None = None, server: bool = False) -> tuple[Path, Path]:
        """Write ``name.crt``/``name.key``: a serving leaf (loopback + kubernetes SANs) or a client leaf."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org:
            attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()),
                           critical=False)
        )
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.DNSName("kubernetes"), x509.DNSName("kubernetes.default"),
                x509.DNSName("kubernetes.default.svc"), x509.DNSName("kubernetes.default.svc.cluster.local"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
            ]), critical=False)
        cert = builder.sign(self.ca_key, hashes.SHA256())
        crt = _write(self.dir / f"{name}.crt", cert.public_bytes(_PEM), 0o644)
        return crt, _write(self.dir / f"{name}.key", _key_pem(key))

    def kubeconfig(self, path: Path, server: str, user: str, *, cert: tuple[Path, Path] | None = None,
                   token: str | None = None) -> Path:
        """A kubeconfig for ``server`` trusting this CA, with a client certificate or a bearer token."""
        creds: dict[str, str] = {}
        if cert:
            creds["client-certificate-data"] = base64.b64encode(cert[0].read_bytes()).decode()
            creds["client-key-data"] = base64.b64encode(cert[1].read_bytes()).decode()
        if token:
            creds["token"] = token
        doc = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {
                "server": server, "certificate-authority-data": base64.b64encode(self.ca.read_bytes()).decode()}}],
            "users": [{"name": user, "user": creds}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
            "current-context": "e2e",
        }
        return _write(path, yaml.safe_dump(doc).encode())
