"""`dra-webhook`: one entry point, one module per subcommand (webhook/commands/<verb>.py)."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import sys

from webhook.commands import EXIT_INTERRUPTED, EXIT_OK, CliError, exit_codes_text

COMMANDS = (
    "serve",
    "check",
    "lint",
    "test",
    "certs",
    "gates",
    "report",
    "audit",
    "preflight",
    "schema",
    "replay",
    "explain",
    "convert",
    "compile",
    "reconcile",
)

DESCRIPTION = """\
Admission webhook for moving GPU workloads from device plugins to Kubernetes 1.37 Dynamic Resource
Allocation, driven by a MigrationPolicy (policies/default.yaml is the bundled default).

Daily use:
  dra-webhook certs --out certs             dev CA + serving certificate
  dra-webhook serve --cert-dir certs        run the webhook on https://0.0.0.0:8443
  dra-webhook check deploy.yaml             what the webhook would do to these manifests (CI)
  dra-webhook convert -w manifests/         rewrite manifests into the policy's DRA form
  dra-webhook lint policies/                check a policy directory
"""


def package_version() -> str:
    """The installed package's version (pyproject.toml's, the one version source), or say it is unknown."""
    try:
        return importlib.metadata.version("dra-migration-webhook")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed as a package)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dra-webhook", description=DESCRIPTION, epilog=exit_codes_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}",
                        help="print the version (package, image and chart share it) and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"webhook.commands.{name}")
        module.add_parser(sub)
        sub.choices[name].set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args._run(args) or 0)
    except CliError as exc:
        print(exc.message, file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
