"""Serving TLS context that follows certificate rotation without a restart and without a bad handshake.

cert-manager renews the Secret; the kubelet swaps the `..data` symlink of the mounted volume
(`tls.crt -> ..data/tls.crt`, `..data -> ..<timestamp>/`). gunicorn's gthread worker asks its
`ssl_context` hook for a context once per accepted connection, so handing it a cached context that
is rebuilt only when the files really changed makes a renewal visible to new connections within
about a second, costs a timestamp compare per connection, and never pairs an old cert with a new key:
the pair is loaded into a fresh context and swapped in only if OpenSSL accepted it.

With a client CA (``serve --client-ca``, issue 47 item 5) the context also requires a client certificate
signed by that CA (the handshake fails without one); the CA file is part of what is watched, so a rotated
CA bundle is picked up the same way as a renewed serving certificate.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography import x509

__all__ = ["CertReloader", "CertificateNotLoaded", "ClientCAError", "gunicorn_ssl_context_hook", "load_client_ca"]

log = logging.getLogger("webhook.tls")

#: How often `context()` looks at the files at most; between checks the hot path is one compare.
CHECK_INTERVAL = 0.5
#: Below this remaining lifetime every (re)load logs a WARNING: renewal is overdue.
EXPIRY_WARNING = dt.timedelta(days=7)

_Fingerprint = tuple[Any, ...]


# TLS 1.2 suites: forward-secret AEAD only (Mozilla's "intermediate" set); OpenSSL's default also offers CBC with
# SHA-2 (ECDHE-ECDSA-AES128-SHA256, -AES256-SHA384). Go's crypto/tls client (kube-apiserver) prefers these anyway.
# TLS 1.3 suites are all AEAD and not set by this string.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM:DHE+CHACHA20:!aNULL"

class CertificateNotLoaded(RuntimeError):
    """No usable certificate/key pair has been loaded yet; the message says why."""


class ClientCAError(ValueError):
    """The client CA file cannot be used; the message names the file and why."""


def load_client_ca(path: str | os.PathLike[str]) -> list[x509.Certificate]:
    """The CA certificates in ``path`` (PEM), checked as OpenSSL will load them; ClientCAError if unusable."""
    try:
        pem = Path(path).read_bytes()
    except OSError as e:
        raise ClientCAError(f"cannot read the client CA file {path}: {e.strerror}") from None
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as e:
        raise ClientCAError(f"{path} holds no PEM certificate ({e})") from None
    for cert in certs:
        try:
            is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            continue  # an old-style root: OpenSSL decides
        if not is_ca:
            raise ClientCAError(f"{path}: {cert.subject.rfc4514_string()} is not a CA certificate "
                                "(BasicConstraints CA:FALSE); give the CA that signs the client certificates")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_verify_locations(cafile=str(path))
    except ssl.SSLError as e:
        raise ClientCAError(f"{path} cannot be loaded as a CA bundle: {e.reason or e}") from None
    return certs


class CertReloader:
    """Caches an `ssl.SSLContext` for `<cert_dir>/tls.crt` + `tls.key` and rebuilds it when they change.

    Thread-safe: gthread calls `context()` from many threads. Only one thread reloads at a time;
    the others keep getting the current context meanwhile. A failed reload (key/cert mismatch,
    half-written file, files mid-swap) keeps the previous context and logs a WARNING; the next
    check retries, so a renewal that lands in several steps is picked up when it is complete.
    """

    def __init__(
        self,
        cert_dir: str | os.PathLike[str],
        min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2,
        *,
        on_load: Callable[[float], None] | None = None,
        cert_name: str = "tls.crt",
        key_name: str = "tls.key",
        check_interval: float = CHECK_INTERVAL,
        client_ca: str | os.PathLike[str] | None = None,
    ) -> None:
        if min_version < ssl.TLSVersion.TLSv1_2:
            raise ValueError(f"TLS minimum must be at least TLSv1_2, got {min_version.name}")
        self.cert_dir = Path(cert_dir)
        self.min_version = min_version
        self.on_load = on_load
        self._cert_path = self.cert_dir / cert_name
        self._key_path = self.cert_dir / key_name
        #: PEM bundle of the CA that signs the client certificates; None: no client certificate asked for.
        self.client_ca = Path(client_ca) if client_ca is not None else None
        self._interval = check_interval
        self._lock = threading.Lock()
        self._ctx: ssl.SSLContext | None = None
        self._loaded_fp: _Fingerprint | None = None
        self._failed_fp: _Fingerprint | None = None
        self._next_check = 0.0
        #: Expiry and serial of the certificate in the current context (None until one loads).
        self.not_after: dt.datetime | None = None
        self.serial: int | None = None
        #: Why the last attempt failed; None once a reload succeeds.
        self.error: str | None = None
        with self._lock:
            self._reload()

    @property
    def loaded(self) -> bool:
        """True once a good pair is being served (readiness should depend on this)."""
        return self._ctx is not None

    def context(self) -> ssl.SSLContext:
        """The current context; looks for new files at most every `check_interval` seconds.

        Never raises once a context has been loaded. Before that it raises CertificateNotLoaded.
        """
        ctx = self._ctx
        if ctx is not None and time.monotonic() < self._next_check:
            return ctx
        # One thread checks; the others do not wait for it unless there is nothing to serve yet.
        if self._lock.acquire(blocking=ctx is None):
            try:
                if ctx is None or time.monotonic() >= self._next_check:
                    self._reload()
            except Exception:  # never let a reload problem fail a handshake we can still serve
                log.exception("unexpected error reloading the serving certificate from %s", self.cert_dir)
                if self._ctx is None:
                    raise
            finally:
                self._lock.release()
        if self._ctx is None:
            raise CertificateNotLoaded(
                f"no serving certificate loaded from {self.cert_dir}: {self.error or 'not yet tried'}"
            )
        return self._ctx

    def reload(self) -> bool:
        """Check the files now (ignoring the interval); True if a new context was swapped in."""
        with self._lock:
            return self._reload()

    # -- internals (called with self._lock held) --------------------------------------------------

    def _reload(self) -> bool:
        self._next_check = time.monotonic() + self._interval
        try:
            fp = self._fingerprint()
        except OSError as e:
            self._fail(("missing", str(e)), f"cannot read {e.filename}: {e.strerror}")
            return False
        if fp == self._loaded_fp and self._ctx is not None:
            return False
        try:
            ctx, cert = self._build(fp)
        except Exception as e:  # OSError, ssl.SSLError, ValueError, or anything odd in a bad PEM
            self._fail(fp, _describe(e))
            return False
        if self._fingerprint_or_none() != fp:
            # The files moved while we read them (kubelet swap, writer mid-way): what we loaded may
            # be a mix. Keep serving the old pair and look again on the next connection.
            log.debug("certificate files in %s changed while loading; retrying", self.cert_dir)
            self._next_check = 0.0
            return False
        self._ctx, self._loaded_fp, self._failed_fp, self.error = ctx, fp, None, None
        self.not_after, self.serial = cert.not_valid_after_utc, cert.serial_number
        self._announce(cert, fp)
        return True

    def _fingerprint(self) -> _Fingerprint:
        """Cheap identity of what the paths point at now: realpaths, mtimes, sizes, `..data` targets.

        ``fp[0]`` is the certificate, ``fp[1]`` the key, ``fp[2]`` the client CA (or None).
        """
        parts: list[Any] = []
        paths = (self._cert_path, self._key_path, self.client_ca)
        for path in paths:
            if path is None:
                parts.append(None)
                continue
            real = os.path.realpath(path)
            st = os.stat(real)
            parts.append((real, st.st_mtime_ns, st.st_size, st.st_ino))
        for folder in dict.fromkeys(p.parent for p in paths if p is not None):
            try:
                parts.append(os.readlink(folder / "..data"))
            except OSError:
                parts.append(None)  # not a kubelet volume
        return tuple(parts)

    def _fingerprint_or_none(self) -> _Fingerprint | None:
        try:
            return self._fingerprint()
        except OSError:
            return None

    def _build(self, fp: _Fingerprint) -> tuple[ssl.SSLContext, x509.Certificate]:
        cert_real, key_real = fp[0][0], fp[1][0]
        with open(cert_real, "rb") as f:
            pem = f.read()
        certs = x509.load_pem_x509_certificates(pem)  # leaf first, then any chain (cert-manager)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = self.min_version
        ctx.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
        ctx.set_ciphers(TLS12_CIPHERS)
        ctx.set_alpn_protocols(["http/1.1"])
        # Raises ssl.SSLError on a cert/key mismatch (KEY_VALUES_MISMATCH) or garbage.
        ctx.load_cert_chain(certfile=cert_real, keyfile=key_real)
        if fp[2] is not None:
            load_client_ca(fp[2][0])  # a clear reason (not a CA, no PEM) before OpenSSL's own
            ctx.load_verify_locations(cafile=fp[2][0])
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx, certs[0]

    def _fail(self, fp: _Fingerprint, message: str) -> None:
        first_time = fp != self._failed_fp or message != self.error
        self._failed_fp, self.error = fp, message
        if not first_time:
            return  # retried every check; log only what is new
        if self._ctx is not None:
            log.warning(
                "serving certificate in %s not reloaded, still serving serial %x: %s",
                self.cert_dir, self.serial, message,
            )
        else:
            log.warning("no serving certificate loaded from %s: %s", self.cert_dir, message)

    def _announce(self, cert: x509.Certificate, fp: _Fingerprint) -> None:
        not_after = cert.not_valid_after_utc
        log.info(
            "serving certificate loaded: serial %x, subject %s, expires %s (%s)",
            cert.serial_number, cert.subject.rfc4514_string(), not_after.isoformat(), fp[0][0],
        )
        if fp[2] is not None:
            log.info("client certificates required: signed by the CA in %s", fp[2][0])
        left = not_after - dt.datetime.now(dt.UTC)
        if left < EXPIRY_WARNING:
            state = "has EXPIRED" if left.total_seconds() <= 0 else f"expires in {left}"
            log.warning(
                "serving certificate serial %x %s (not after %s); renewal is overdue",
                cert.serial_number, state, not_after.isoformat(),
            )
        if self.on_load is not None:
            try:
                self.on_load(not_after.timestamp())
            except Exception:  # a metrics hook must not break TLS
                log.exception("on_load callback failed")


def _describe(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError) and e.reason == "KEY_VALUES_MISMATCH":
        return "tls.key does not match tls.crt (KEY_VALUES_MISMATCH)"
    if isinstance(e, OSError) and e.filename:
        return f"cannot read {e.filename}: {e.strerror}"
    return f"{type(e).__name__}: {e}"


def gunicorn_ssl_context_hook(
    reloader: CertReloader,
) -> Callable[[Any, Callable[[], ssl.SSLContext]], ssl.SSLContext]:
    """A gunicorn `ssl_context` server hook serving `reloader`'s cached context.

    In the gunicorn config module: `ssl_context = gunicorn_ssl_context_hook(reloader)`. gunicorn
    still needs `certfile`/`keyfile` set (they switch TLS on and are checked at start-up); the
    default factory that would re-read them on every connection is not called.
    """

    def ssl_context(config: Any, default_ssl_context_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        return reloader.context()

    return ssl_context
