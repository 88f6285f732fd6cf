"""`dra-webhook certs`: a dev CA and serving certificate, to run the webhook without cert-manager."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from webhook.commands import Subparsers
from webhook.serve import CA_MIN_DAYS

# cryptography (webhook.serve.certs) is imported by run() and the --san check only: every other command builds this
# parser too (webhook.cli), and the import costs each of them about 9 MB of start-up memory (issue 29).

DESCRIPTION = """\
Write a development CA and a serving certificate signed by it, in the layout of a cert-manager
kubernetes.io/tls Secret, so `dra-webhook serve --cert-dir DIR` can use the directory as is:

  ca.crt   CA certificate (ECDSA P-256); its base64 is the webhook configuration's caBundle
  ca.key   CA private key, mode 0600 (lets --reuse-ca re-issue tls.crt under the same caBundle)
  tls.crt  serving certificate; SANs <service>.<namespace>.svc, <service>.<namespace>.svc.cluster.local,
           localhost, 127.0.0.1, ::1 and every --san
  tls.key  serving private key, mode 0600

Existing files in DIR are OVERWRITTEN. Each is replaced atomically, so a server running on DIR
never reads half a file and switches to the new pair on its next connection. In a cluster, let
cert-manager issue the certificate instead (deploy/).
"""

EPILOG = """\
examples:
  dra-webhook certs                                   # ./certs for the default service/namespace
  dra-webhook certs --out /tmp/wh --san host.docker.internal --san 172.18.0.1   # kind, out-of-cluster
  dra-webhook certs --out certs --reuse-ca --days 30  # new tls.crt/tls.key, same CA and caBundle
"""


def _positive_days(text: str) -> int:
    try:
        days = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of days") from None
    if days < 1:
        raise argparse.ArgumentTypeError(f"validity must be at least 1 day, got {days}")
    return days


def _san(text: str) -> str:
    from webhook.serve import certs

    try:
        certs.parse_san(text)
    except certs.CertError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_parser(subparsers: Subparsers) -> None:
    """Register `certs` on the `dra-webhook` subparsers."""
    p = subparsers.add_parser(
        "certs",
        help="write a dev CA + serving certificate (ca.crt, tls.crt, tls.key) and print the caBundle",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--out", metavar="DIR", type=Path, default=Path("certs"),
        help="directory to write into, created if missing (default: %(default)s)",
    )
    p.add_argument(
        "--service", default="dra-webhook",
        help="name of the webhook's Service; goes into the DNS SANs (default: %(default)s)",
    )
    p.add_argument(
        "--namespace", default="dra-webhook",
        help="namespace of the webhook's Service; goes into the DNS SANs (default: %(default)s)",
    )
    p.add_argument(
        "--days", type=_positive_days, default=365,
        help="validity of the serving certificate in days (default: %(default)s; the CA gets at least "
        f"{CA_MIN_DAYS})",
    )
    p.add_argument(
        "--san", action="append", default=[], metavar="NAME_OR_IP", type=_san,
        help="extra subject alternative name, DNS name or IP address; repeat for several",
    )
    p.add_argument(
        "--reuse-ca", action="store_true",
        help="sign with the existing DIR/ca.crt + ca.key instead of making a new CA, so an installed "
        "caBundle stays valid (only tls.crt and tls.key are rewritten)",
    )


def run(args: argparse.Namespace) -> int:
    """Write the files, list them, and print the base64 caBundle; 1 with a one-line error on failure."""
    from cryptography import x509

    from webhook.serve import certs

    out: Path = args.out
    reuse_ca = bool(getattr(args, "reuse_ca", False))
    existed = {p.name for p in out.glob("*") if p.name in {"ca.crt", "ca.key", "tls.crt", "tls.key"}}
    try:
        paths = certs.generate(
            out, service=args.service, namespace=args.namespace, days=args.days,
            extra_sans=args.san, reuse_ca=reuse_ca,
        )
    except certs.CertError as e:
        print(f"dra-webhook certs: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"dra-webhook certs: cannot write {e.filename or out}: {e.strerror}", file=sys.stderr)
        return 1

    written = [paths.tls_crt, paths.tls_key] if reuse_ca else list(paths.all)
    leaf = x509.load_pem_x509_certificate(paths.tls_crt.read_bytes())
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    print(f"Wrote to {out}/:")
    for path in written:
        note = "overwritten" if path.name in existed else "new"
        print(f"  {path}  ({note}{', mode 0600' if path.suffix == '.key' else ''})")
    if reuse_ca:
        print(f"  {paths.ca_crt}  (kept: existing CA reused)")
    expires = leaf.not_valid_after_utc.isoformat()
    print(f"Serving certificate: serial {leaf.serial_number:x}, expires {expires}")
    names = [*sans.get_values_for_type(x509.DNSName), *map(str, sans.get_values_for_type(x509.IPAddress))]
    print("  SANs: " + ", ".join(names))
    print("caBundle (base64 of ca.crt, for webhooks[].clientConfig.caBundle):")
    print(certs.ca_bundle_b64(paths.ca_crt))
    return 0
