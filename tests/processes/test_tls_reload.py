"""webhook.serve.tls.CertReloader over real TLS: kubelet-style rotation, bad pairs, TLS floor, real gunicorn."""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509

from tests.builders.tls import KubeletVolume, pem_cert
from webhook.serve import certs
from webhook.serve.tls import CertificateNotLoaded, CertReloader, gunicorn_ssl_context_hook

REPO = Path(__file__).resolve().parents[2]
WAIT = 2.0  # seconds to wait for a rotation to show (the reloader looks every 0.5 s)


# --- helpers ------------------------------------------------------------------------------------


class TLSServer:
    """Accepts connections on 127.0.0.1 and wraps each with a context asked for per connection,
    as gunicorn's gthread worker does; answers b'ok' after the handshake."""

    def __init__(self, context: Callable[[], ssl.SSLContext]) -> None:
        self.context = context
        self.errors: list[BaseException] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            conn, _ = self.listener.accept()
            if self._stop.is_set():
                conn.close()
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            with self.context().wrap_socket(conn, server_side=True) as s:
                s.sendall(b"ok")
        except (ssl.SSLError, OSError) as e:
            self.errors.append(e)
            conn.close()

    def close(self) -> None:
        self._stop.set()
        socket.create_connection(("127.0.0.1", self.port)).close()
        self._thread.join(5)
        self.listener.close()


@contextmanager
def serving(context: Callable[[], ssl.SSLContext]) -> Iterator[TLSServer]:
    server = TLSServer(context)
    try:
        yield server
    finally:
        server.close()


def client(cafile: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(cafile))
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT  # as Python 3.13 does by default
    return ctx


def connect(ctx: ssl.SSLContext, port: int, hostname: str = "localhost") -> int:
    """One verified handshake; returns the serial number of the certificate the server presented."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname=hostname) as s:
            assert s.recv(2) == b"ok"
            return x509.load_der_x509_certificate(s.getpeercert(binary_form=True)).serial_number


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def wait_for(predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture
def cert_dir(tmp_path: Path) -> Path:
    certs.generate(tmp_path / "certs")
    return tmp_path / "certs"


def reissue(cert_dir: Path) -> int:
    """New tls.crt/tls.key from the same CA (files replaced atomically, key first)."""
    return serial_of(certs.generate(cert_dir, reuse_ca=True).tls_crt)


# --- basic serving ------------------------------------------------------------------------------


def test_serves_the_loaded_certificate_with_strict_verification(cert_dir: Path) -> None:
    loads: list[float] = []
    reloader = CertReloader(cert_dir, on_load=loads.append)
    leaf = x509.load_pem_x509_certificate((cert_dir / "tls.crt").read_bytes())
    assert reloader.loaded and reloader.error is None
    assert reloader.serial == leaf.serial_number
    assert reloader.not_after == leaf.not_valid_after_utc
    assert loads == [leaf.not_valid_after_utc.timestamp()]
    with serving(reloader.context) as server:
        for host in ("localhost", "127.0.0.1", "dra-webhook.dra-webhook.svc"):
            assert connect(client(cert_dir / "ca.crt"), server.port, host) == leaf.serial_number
    assert server.errors == []


def test_context_is_cached_until_the_files_change(cert_dir: Path) -> None:
    reloader = CertReloader(cert_dir, check_interval=0)  # look at the files on every call
    first = reloader.context()
    assert reloader.context() is first  # unchanged files: no rebuild
    new_serial = reissue(cert_dir)
    second = reloader.context()
    assert second is not first and reloader.serial == new_serial


def test_hot_path_does_not_look_at_the_disk_between_checks(cert_dir: Path) -> None:
    reloader = CertReloader(cert_dir, check_interval=3600)
    first, old_serial = reloader.context(), reloader.serial
    reissue(cert_dir)
    assert reloader.context() is first and reloader.serial == old_serial
    assert reloader.reload() is True  # an explicit check still sees it
    assert reloader.context() is not first


def test_alpn_http11_and_tls_floor(cert_dir: Path) -> None:
    reloader = CertReloader(cert_dir)
    assert reloader.context().minimum_version == ssl.TLSVersion.TLSv1_2
    with serving(reloader.context) as server:
        ctx = client(cert_dir / "ca.crt")
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                assert s.version() == "TLSv1.2"
                assert s.selected_alpn_protocol() == "http/1.1"


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_tls11_client_is_refused_for_its_version(cert_dir: Path) -> None:
    reloader = CertReloader(cert_dir)
    with serving(reloader.context) as server:
        old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        old.load_verify_locations(str(cert_dir / "ca.crt"))
        old.set_ciphers("DEFAULT:@SECLEVEL=0")  # so the refusal is about the version, not ciphers
        old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_1
        with pytest.raises(ssl.SSLError) as exc:
            connect(old, server.port)
        assert exc.value.reason == "TLSV1_ALERT_PROTOCOL_VERSION"
        assert wait_for(lambda: bool(server.errors))
        assert getattr(server.errors[0], "reason", None) == "UNSUPPORTED_PROTOCOL"
        assert connect(client(cert_dir / "ca.crt"), server.port) == reloader.serial  # still serving


def test_min_version_13_refuses_tls12_and_floor_cannot_go_below_12(cert_dir: Path) -> None:
    reloader = CertReloader(cert_dir, ssl.TLSVersion.TLSv1_3)
    with serving(reloader.context) as server:
        ctx = client(cert_dir / "ca.crt")
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(ssl.SSLError, match="PROTOCOL_VERSION"):
            connect(ctx, server.port)
    with pytest.raises(ValueError, match="at least TLSv1_2"):
        CertReloader(cert_dir, ssl.TLSVersion.TLSv1_1)


# --- rotation -----------------------------------------------------------------------------------


def test_kubelet_atomic_swaps_under_load_fail_no_handshake(tmp_path: Path) -> None:
    ca = certs.new_ca()
    volume = KubeletVolume(tmp_path / "tls", ca)
    (tmp_path / "ca.crt").write_bytes(pem_cert(ca[0]))
    reloader = CertReloader(volume.root)  # the default 0.5 s check interval
    assert reloader.serial == volume.serial
    issued = [volume.serial]
    per_client: list[list[int]] = [[] for _ in range(3)]
    seen: set[int] = set()
    failures: list[BaseException] = []
    stop = threading.Event()

    def client_loop(mine: list[int]) -> None:
        ctx = client(tmp_path / "ca.crt")
        while not stop.is_set():
            try:
                serial = connect(ctx, server.port)
            except Exception as e:  # any failure is what this test is about
                failures.append(e)
            else:
                mine.append(serial)
                seen.add(serial)

    def connections() -> int:
        return sum(map(len, per_client))

    with serving(reloader.context) as server:
        clients = [threading.Thread(target=client_loop, args=(mine,)) for mine in per_client]
        for t in clients:
            t.start()
        try:
            for _ in range(4):
                before = connections()
                assert wait_for(lambda b=before: connections() > b + 10)  # the clients really are connecting
                issued.append(volume.publish())
                assert wait_for(lambda: issued[-1] in seen), f"serial {issued[-1]:x} never served"
        finally:
            stop.set()
            for t in clients:
                t.join(10)

    assert failures == [] and server.errors == []
    assert reloader.serial == issued[-1] and reloader.error is None
    assert seen == set(issued)
    # Each client's connections see certificates in issue order: never back to an older one.
    order = {serial: i for i, serial in enumerate(issued)}
    for mine in per_client:
        indices = [order[s] for s in mine]
        assert indices == sorted(indices)


def test_mismatched_or_torn_files_keep_the_old_context(
    cert_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reloader = CertReloader(cert_dir)
    good, good_serial = reloader.context(), reloader.serial
    key_before = (cert_dir / "tls.key").read_bytes()
    reissue(cert_dir)
    (cert_dir / "tls.key").write_bytes(key_before)  # new cert, old key: a mismatched pair

    with caplog.at_level(logging.WARNING, logger="webhook.tls"):
        assert reloader.reload() is False
    assert reloader.context() is good and reloader.serial == good_serial
    assert "does not match" in (reloader.error or "")
    assert reloader.loaded
    assert any(
        "not reloaded" in r.getMessage() and f"{good_serial:x}" in r.getMessage() for r in caplog.records
    )

    with serving(reloader.context) as server:
        assert connect(client(cert_dir / "ca.crt"), server.port) == good_serial

        # A half-written certificate, then a missing key: still the old pair.
        pem = (cert_dir / "tls.crt").read_bytes()
        (cert_dir / "tls.crt").write_bytes(pem[: len(pem) // 2])
        assert reloader.reload() is False and reloader.context() is good
        (cert_dir / "tls.key").unlink()
        assert reloader.reload() is False and reloader.context() is good
        assert "tls.key" in (reloader.error or "")
        assert connect(client(cert_dir / "ca.crt"), server.port) == good_serial

        # The complete new pair lands: it is picked up and served.
        new_serial = reissue(cert_dir)
        assert reloader.reload() is True and reloader.error is None
        assert connect(client(cert_dir / "ca.crt"), server.port) == new_serial
    assert server.errors == []


def test_not_loaded_yet_then_loaded(tmp_path: Path) -> None:
    reloader = CertReloader(tmp_path, check_interval=0)
    assert not reloader.loaded and reloader.serial is None
    assert "tls.crt" in (reloader.error or "")
    with pytest.raises(CertificateNotLoaded, match="no serving certificate loaded"):
        reloader.context()
    paths = certs.generate(tmp_path)
    assert isinstance(reloader.context(), ssl.SSLContext)
    assert reloader.loaded and reloader.serial == serial_of(paths.tls_crt)


def test_logs_load_and_warns_near_expiry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="webhook.tls"):
        certs.generate(tmp_path / "long", days=365)
        CertReloader(tmp_path / "long")
        certs.generate(tmp_path / "short", days=3)
        short = CertReloader(tmp_path / "short")
    loaded = [r for r in caplog.records if r.getMessage().startswith("serving certificate loaded: serial")]
    assert len(loaded) == 2 and all("expires 20" in r.getMessage() for r in loaded)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"{short.serial:x}" in warnings[0].getMessage()
    assert "expires in" in warnings[0].getMessage()


def test_a_failing_on_load_callback_does_not_break_tls(cert_dir: Path) -> None:
    def boom(_: float) -> None:
        raise RuntimeError("metrics down")

    reloader = CertReloader(cert_dir, on_load=boom)
    assert reloader.loaded
    with serving(reloader.context) as server:
        assert connect(client(cert_dir / "ca.crt"), server.port) == reloader.serial


# --- real gunicorn ------------------------------------------------------------------------------


@contextmanager
def gunicorn(cert_dir: Path, workdir: Path) -> Iterator[int]:
    """gunicorn gthread serving a trivial WSGI app with `ssl_context = gunicorn_ssl_context_hook(...)`."""
    (workdir / "tinyapp.py").write_text(
        "def app(environ, start_response):\n"
        "    start_response('200 OK', [('Content-Type', 'text/plain'), ('Content-Length', '2')])\n"
        "    return [b'ok']\n"
    )
    conf = workdir / "gunicorn_conf.py"
    conf.write_text(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from webhook.serve.tls import CertReloader, gunicorn_ssl_context_hook
        certfile = {str(cert_dir / "tls.crt")!r}
        keyfile = {str(cert_dir / "tls.key")!r}
        ssl_context = gunicorn_ssl_context_hook(CertReloader({str(cert_dir)!r}))
        """)
    )
    listener = socket.create_server(("127.0.0.1", 0))
    listener.set_inheritable(True)
    port = listener.getsockname()[1]
    cmd = [
        sys.executable, "-m", "gunicorn", "-c", str(conf), "--chdir", str(workdir),
        "-b", f"fd://{listener.fileno()}", "-k", "gthread", "--threads", "2", "-w", "1",
        "--no-control-socket", "--keep-alive", "30", "--log-level", "warning", "tinyapp:app",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, pass_fds=[listener.fileno()], stderr=subprocess.PIPE, text=True)
    try:
        yield port
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        listener.close()
        assert "Traceback" not in err, err


def https_get(
    ctx: ssl.SSLContext, port: int, conn: http.client.HTTPSConnection | None = None
) -> tuple[int, int]:
    """(status, serial of the presented certificate) for GET / over a new or given connection."""
    own = conn is None
    conn = conn or http.client.HTTPSConnection("localhost", port, context=ctx, timeout=5)
    try:
        conn.request("GET", "/")
        resp = conn.getresponse()
        assert resp.read() == b"ok"
        der = conn.sock.getpeercert(binary_form=True)
        return resp.status, x509.load_der_x509_certificate(der).serial_number
    finally:
        if own:
            conn.close()  # a new connection per call: closed here, not by the garbage collector


def test_gunicorn_hook_follows_rotation(tmp_path: Path, cert_dir: Path) -> None:
    ctx = client(cert_dir / "ca.crt")
    old_serial = serial_of(cert_dir / "tls.crt")
    with gunicorn(cert_dir, tmp_path) as port:

        def up() -> bool:
            try:
                return https_get(ctx, port) == (200, old_serial)
            except OSError:
                return False

        assert wait_for(up, timeout=30), "gunicorn did not come up"
        kept = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=5)
        assert https_get(ctx, port, kept) == (200, old_serial)

        new_serial = reissue(cert_dir)
        statuses: list[int] = []

        def rotated() -> bool:
            status, serial = https_get(ctx, port)  # a failure here fails the test
            statuses.append(status)
            return serial == new_serial

        assert wait_for(rotated), "gunicorn kept serving the old certificate"
        assert set(statuses) == {200}
        # The keep-alive connection opened before the rotation carries on with its session.
        assert https_get(ctx, port, kept) == (200, old_serial)
        kept.close()


def test_hook_has_gunicorns_arity(cert_dir: Path) -> None:
    from gunicorn.config import Config

    cfg = Config()
    hook = gunicorn_ssl_context_hook(CertReloader(cert_dir))
    cfg.set("ssl_context", hook)  # gunicorn validates the hook takes (config, factory)
    assert cfg.ssl_context(cfg, lambda: pytest.fail("default factory must not be used")) is hook(cfg, None)


def test_files_swapped_during_a_load_are_read_again_on_the_next_connection(tmp_path: Path) -> None:
    volume = KubeletVolume(tmp_path / "tls", certs.new_ca())
    swapped: list[int] = []

    class SwapMidLoad(CertReloader):
        def _build(self, fp):  # type: ignore[no-untyped-def]
            built = super()._build(fp)
            if self.loaded and not swapped:
                swapped.append(volume.publish())  # the kubelet swaps ..data while we were reading
            return built

    reloader = SwapMidLoad(volume.root, check_interval=3600)
    first, first_serial = reloader.context(), reloader.serial
    volume.publish()
    assert reloader.reload() is False  # what it read is already stale: not swapped in
    assert reloader.context() is not first  # ...and re-read at once, without waiting an interval
    assert reloader.serial == swapped[0] != first_serial
