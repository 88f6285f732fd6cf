"""TLS test material: a kubelet's projected Secret volume, rotated the way the kubelet swaps it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from webhook.serve import certs


def pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def pem_key(key: Any) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class KubeletVolume:
    """A Secret volume as the kubelet's AtomicWriter lays it out and updates it."""

    def __init__(self, root: Path, ca: tuple[x509.Certificate, Any]) -> None:
        self.root, self.ca, self.generation = root, ca, 0
        root.mkdir()
        self.serial = self.publish()
        for name in ("tls.crt", "tls.key", "ca.crt"):
            (root / name).symlink_to(f"..data/{name}")

    def publish(self, key_pem: bytes | None = None) -> int:
        """Write a new leaf from the same CA into a fresh `..<timestamp>` dir and swap `..data`."""
        self.generation += 1
        ts = f"..2026_12_03_10_00_{self.generation:02d}.{os.getpid()}"
        tmp = self.root / ts
        tmp.mkdir()
        cert, key = certs.issue_serving_cert(*self.ca, certs.serving_sans("dra-webhook", "dra-webhook"))
        (tmp / "tls.crt").write_bytes(pem_cert(cert))
        (tmp / "tls.key").write_bytes(key_pem or pem_key(key))
        (tmp / "ca.crt").write_bytes(pem_cert(self.ca[0]))
        data = self.root / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        (self.root / "..data_tmp").symlink_to(ts)
        os.replace(self.root / "..data_tmp", data)  # the atomic step
        if old:
            shutil.rmtree(self.root / old)  # the kubelet removes the previous payload right away
        return cert.serial_number
