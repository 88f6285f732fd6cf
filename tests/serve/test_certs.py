"""webhook.serve.certs and `dra-webhook certs`: the files, their extensions, and real strict TLS handshakes."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import ipaddress
import socket
import ssl
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from webhook.commands import certs as certs_cmd
from webhook.serve import certs

# --- helpers ------------------------------------------------------------------------------------


def strict_client(cafile: Path) -> ssl.SSLContext:
    """What Python 3.13's ssl.create_default_context() does: X509_STRICT + PARTIAL_CHAIN on."""
    ctx = ssl.create_default_context(cafile=str(cafile))
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT | ssl.VERIFY_X509_PARTIAL_CHAIN
    return ctx


@contextmanager
def tls_server(certfile: Path, keyfile: Path, host: str = "127.0.0.1") -> Iterator[int]:
    """A thread accepting TLS connections and answering b'ok'; yields the port."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(certfile), str(keyfile))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, 0), family=family)
    stop = threading.Event()

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            if stop.is_set():
                conn.close()
                return
            try:
                with ctx.wrap_socket(conn, server_side=True) as s:
                    s.sendall(b"ok")
            except (ssl.SSLError, OSError):
                pass  # the client refused us; the client side asserts

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    try:
        yield port
    finally:
        stop.set()
        socket.create_connection((host, port)).close()
        thread.join(5)
        listener.close()


def handshake(ctx: ssl.SSLContext, port: int, server_hostname: str, host: str = "127.0.0.1") -> bytes:
    with socket.create_connection((host, port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname=server_hostname) as s:
            return s.recv(2)


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


@pytest.fixture
def generated(tmp_path: Path) -> certs.CertPaths:
    return certs.generate(tmp_path / "certs", service="dra-webhook", namespace="gpu-system")


# --- files and extensions -----------------------------------------------------------------------


def test_generate_writes_secret_layout_with_private_keys_0600(generated: certs.CertPaths) -> None:
    assert {p.name for p in generated.all} == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    for path in generated.all:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o600 if path.suffix == ".key" else 0o644), (path, oct(mode))
    assert not [p for p in generated.tls_crt.parent.iterdir() if p.name.endswith(".tmp")]


def test_ca_is_a_strict_ecdsa_ca(generated: certs.CertPaths) -> None:
    ca = load(generated.ca_crt)
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey)
    assert ca.public_key().curve.name == "secp256r1"
    bc = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca
    ku = ca.extensions.get_extension_for_class(x509.KeyUsage)
    assert ku.critical and ku.value.key_cert_sign
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert ski == x509.SubjectKeyIdentifier.from_public_key(ca.public_key())
    assert ca.subject == ca.issuer and ca.subject.rfc4514_string()  # self-signed, non-empty DN


def test_leaf_has_service_sans_aki_and_server_auth(generated: certs.CertPaths) -> None:
    ca, leaf = load(generated.ca_crt), load(generated.tls_crt)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "dra-webhook.gpu-system.svc",
        "dra-webhook.gpu-system.svc.cluster.local",
        "localhost",
    ]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ca_ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ca_ski.digest
    assert leaf.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    cn = leaf.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
    assert cn == "dra-webhook.gpu-system.svc"
    assert leaf.issuer == ca.subject
    ca.public_key().verify(leaf.signature, leaf.tbs_certificate_bytes, ec.ECDSA(hashes.SHA256()))


def test_days_sets_leaf_lifetime_and_ca_outlives_it(tmp_path: Path) -> None:
    paths = certs.generate(tmp_path, days=30)
    leaf, ca = load(paths.tls_crt), load(paths.ca_crt)
    life = leaf.not_valid_after_utc - leaf.not_valid_before_utc
    assert dt.timedelta(days=30) <= life <= dt.timedelta(days=30, minutes=10)
    assert ca.not_valid_after_utc > leaf.not_valid_after_utc


def test_long_names_keep_a_short_cn(tmp_path: Path) -> None:
    svc, ns = "s" * 40, "n" * 40
    leaf = load(certs.generate(tmp_path, service=svc, namespace=ns).tls_crt)
    cn = leaf.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
    assert len(cn) <= 64
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{svc}.{ns}.svc" in san.get_values_for_type(x509.DNSName)


def test_extra_sans_are_typed_and_bad_ones_rejected(tmp_path: Path) -> None:
    leaf = load(
        certs.generate(tmp_path, extra_sans=["Host.Docker.Internal", "172.18.0.1", "localhost"]).tls_crt
    )
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "host.docker.internal" in san.get_values_for_type(x509.DNSName)
    assert san.get_values_for_type(x509.DNSName).count("localhost") == 1
    assert ipaddress.ip_address("172.18.0.1") in san.get_values_for_type(x509.IPAddress)
    for bad in ("has space", "under_score.example", "-leading.example"):
        with pytest.raises(certs.CertError, match="neither an IP address nor a valid DNS name"):
            certs.generate(tmp_path / "bad", extra_sans=[bad])
    with pytest.raises(certs.CertError, match="DNS-1123 label"):
        certs.generate(tmp_path / "bad", service="Web_Hook")
    assert not (tmp_path / "bad").exists()  # nothing written on a bad request


def test_reuse_ca_keeps_the_ca_and_its_bundle(tmp_path: Path) -> None:
    first = certs.generate(tmp_path)
    ca_before, bundle_before = first.ca_crt.read_bytes(), certs.ca_bundle_b64(first.ca_crt)
    serial_before = load(first.tls_crt).serial_number
    second = certs.generate(tmp_path, reuse_ca=True)
    assert second.ca_crt.read_bytes() == ca_before
    assert certs.ca_bundle_b64(second.ca_crt) == bundle_before
    assert load(second.tls_crt).serial_number != serial_before
    with tls_server(second.tls_crt, second.tls_key) as port:
        assert handshake(strict_client(first.ca_crt), port, "localhost") == b"ok"
    with pytest.raises(certs.CertError, match="does not exist"):
        certs.generate(tmp_path / "empty", reuse_ca=True)


def test_reuse_ca_refuses_a_key_of_another_ca(tmp_path: Path) -> None:
    paths = certs.generate(tmp_path)
    other = certs.generate(tmp_path / "other")
    paths.ca_key.write_bytes(other.ca_key.read_bytes())
    with pytest.raises(certs.CertError, match="does not belong to"):
        certs.load_ca(paths.ca_crt, paths.ca_key)
    assert certs.load_ca(other.ca_crt, other.ca_key)[0].subject == load(other.ca_crt).subject


def test_ca_bundle_b64_is_standard_base64_of_the_pem(generated: certs.CertPaths) -> None:
    bundle = certs.ca_bundle_b64(generated.ca_crt)
    assert base64.b64decode(bundle, validate=True) == generated.ca_crt.read_bytes()
    assert bundle.startswith("LS0tLS1CRUdJTi")  # "-----BEGIN"


# --- real handshakes under X509_STRICT ----------------------------------------------------------


@pytest.mark.parametrize(
    "server_hostname",
    ["localhost", "127.0.0.1", "dra-webhook.gpu-system.svc", "dra-webhook.gpu-system.svc.cluster.local"],
)
def test_strict_client_verifies_the_serving_cert(generated: certs.CertPaths, server_hostname: str) -> None:
    ctx = strict_client(generated.ca_crt)
    assert ctx.verify_flags & ssl.VERIFY_X509_STRICT
    with tls_server(generated.tls_crt, generated.tls_key) as port:
        assert handshake(ctx, port, server_hostname) == b"ok"


def test_strict_client_over_ipv6_loopback(generated: certs.CertPaths) -> None:
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with tls_server(generated.tls_crt, generated.tls_key, host="::1") as port:
        assert handshake(strict_client(generated.ca_crt), port, "::1", host="::1") == b"ok"


def test_wrong_hostname_and_wrong_ca_are_refused(tmp_path: Path, generated: certs.CertPaths) -> None:
    other = certs.generate(tmp_path / "other")
    with tls_server(generated.tls_crt, generated.tls_key) as port:
        with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
            handshake(strict_client(generated.ca_crt), port, "dra-webhook.other-ns.svc")
        with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
            handshake(strict_client(other.ca_crt), port, "localhost")


def test_strict_mode_really_bites_a_leaf_without_aki(tmp_path: Path, generated: certs.CertPaths) -> None:
    """Control for the tests above: the same CA, a leaf lacking AKI, is accepted only without STRICT."""
    ca_cert, ca_key = certs.load_ca(generated.ca_crt, generated.ca_key)
    leaf, key = certs.issue_serving_cert(ca_cert, ca_key, certs.serving_sans("dra-webhook", "gpu-system"))
    builder = x509.CertificateBuilder(
        issuer_name=leaf.issuer,
        subject_name=leaf.subject,
        public_key=leaf.public_key(),
        serial_number=leaf.serial_number,
        not_valid_before=leaf.not_valid_before_utc,
        not_valid_after=leaf.not_valid_after_utc,
        extensions=[e for e in leaf.extensions if not isinstance(e.value, x509.AuthorityKeyIdentifier)],
    )
    no_aki = builder.sign(ca_key, hashes.SHA256())
    crt, keyfile = tmp_path / "noaki.crt", tmp_path / "noaki.key"
    crt.write_bytes(no_aki.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    lax = ssl.create_default_context(cafile=str(generated.ca_crt))
    lax.verify_flags &= ~ssl.VERIFY_X509_STRICT
    with tls_server(crt, keyfile) as port:
        assert handshake(lax, port, "localhost") == b"ok"
        with pytest.raises(ssl.SSLCertVerificationError, match="[Aa]uthority [Kk]ey [Ii]dentifier"):
            handshake(strict_client(generated.ca_crt), port, "localhost")


# --- `dra-webhook certs` ------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dra-webhook")
    certs_cmd.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def bundle_from(stdout: str) -> str:
    lines = stdout.splitlines()
    return lines[lines.index("caBundle (base64 of ca.crt, for webhooks[].clientConfig.caBundle):") + 1]


def test_certs_command_writes_files_and_prints_the_ca_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = parse(
        ["certs", "--out", str(out), "--namespace", "gpu-system", "--san", "10.96.0.10", "--days", "10"]
    )
    assert certs_cmd.run(args) == 0
    text = capsys.readouterr().out
    bundle = bundle_from(text)
    assert base64.b64decode(bundle, validate=True) == (out / "ca.crt").read_bytes()
    assert base64.b64decode(bundle).startswith(b"-----BEGIN CERTIFICATE-----")
    for name in ("ca.crt", "ca.key", "tls.crt", "tls.key"):
        assert str(out / name) in text
    assert "overwritten" not in text
    leaf = load(out / "tls.crt")
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("10.96.0.10") in san.get_values_for_type(x509.IPAddress)
    assert "dra-webhook.gpu-system.svc" in san.get_values_for_type(x509.DNSName)
    assert leaf.not_valid_after_utc - leaf.not_valid_before_utc <= dt.timedelta(days=10, minutes=10)
    with tls_server(out / "tls.crt", out / "tls.key") as port:
        assert handshake(strict_client(out / "ca.crt"), port, "dra-webhook.gpu-system.svc") == b"ok"

    # A second run replaces everything and says so.
    assert certs_cmd.run(args) == 0
    again = capsys.readouterr().out
    assert again.count("overwritten") == 4
    assert bundle_from(again) != bundle  # a new CA, hence a new caBundle


def test_certs_command_defaults_and_reuse_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    args = parse(["certs"])
    assert (args.out, args.service, args.namespace, args.days, args.san) == (
        Path("certs"),
        "dra-webhook",
        "dra-webhook",
        365,
        [],
    )
    assert certs_cmd.run(args) == 0
    ca = (tmp_path / "certs" / "ca.crt").read_bytes()
    capsys.readouterr()
    assert certs_cmd.run(parse(["certs", "--reuse-ca"])) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "certs" / "ca.crt").read_bytes() == ca
    assert "kept" in out and base64.b64decode(bundle_from(out)) == ca


def test_certs_command_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["certs", "--san", "not a name"], ["certs", "--days", "0"]):
        with pytest.raises(SystemExit) as exc:
            parse(argv)
        assert exc.value.code == 2
    assert "not a name" in capsys.readouterr().err
    assert certs_cmd.run(parse(["certs", "--out", str(tmp_path / "none"), "--reuse-ca"])) == 1
    err = capsys.readouterr().err
    assert err.startswith("dra-webhook certs: cannot reuse the CA") and err.count("\n") == 1
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert certs_cmd.run(parse(["certs", "--out", str(blocker / "sub")])) == 1
    assert capsys.readouterr().err.startswith("dra-webhook certs: cannot write")


def test_help_mentions_overwrite_and_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["certs", "--help"])
    text = capsys.readouterr().out
    assert "OVERWRITTEN" in text
    for opt in ("--out", "--service", "--namespace", "--days", "--san", "--reuse-ca", "caBundle"):
        assert opt in text
