"""`dra-webhook lint [DIR]`: check a policy directory the way the server loads it, before it ships.

Same loader as the server, so "lint passes" means "the server will load it"; problems are printed as
``file:line: key.path: message``, one per line, which editors and CI annotate.
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

from webhook.policy.loader import lint_report


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lint",
        help="check a policy directory or file (exit 1 on any error)",
        description="Load a MigrationPolicy directory (all *.yaml/*.yml directly in it) or file exactly as "
        "the server does and print every error as file:line: key.path: message. Expired exceptions are "
        "printed as warnings. Exit 0: the policy loads; 1: it has errors.",
    )
    p.add_argument(
        "dir",
        nargs="?",
        default="policies",
        metavar="DIR",
        help="policy directory or file (default: policies)",
    )
    p.add_argument(
        "--at",
        type=_date,
        default=None,
        metavar="DATE",
        help="judge exception expiry as of this UTC date (YYYY-MM-DD)",
    )


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


def run(args: argparse.Namespace) -> int:
    report = lint_report(Path(args.dir), today=getattr(args, "at", None))
    for problem in report.errors:
        print(problem)
    for problem in report.warnings:
        print(f"warning: {problem}")
    if report.errors or report.policy is None:
        n = len(report.errors)
        print(f"{n} error{'s' if n != 1 else ''}")
        return 1
    print(f"policy OK: {report.policy.identity} ({', '.join(report.policy.files)})")
    return 0
