"""`dra-webhook schema`: the JSON Schema of MigrationPolicy, generated from the pydantic models.

Editors (the YAML language server, through the ``# yaml-language-server: $schema=...`` comment at the top
of each shipped policy) use it to complete and check keys while a policy is typed. It is generated, never
written by hand, so it cannot drift from what the loader accepts; ``policies/migrationpolicy.schema.json``
is this command's output and a test keeps it so. The loader stays the authority: it also checks what a
schema cannot say (cross-field rules, known rule ids and gates) and reports file:line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from webhook.commands import Subparsers

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "schema",
        help="print the JSON Schema of MigrationPolicy (for editors and CI)",
        description="Print the JSON Schema (draft 2020-12) of a MigrationPolicy document, generated from the\n"
        "webhook's own policy model, with a description for every key. The repository ships it as\n"
        "policies/migrationpolicy.schema.json; policy files point editors at it with a first line like\n"
        "  # yaml-language-server: $schema=./migrationpolicy.schema.json",
        epilog="example: dra-webhook schema > policies/migrationpolicy.schema.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                   help="write to FILE instead of standard output")


def schema() -> dict[str, Any]:
    """The schema as a dict: pydantic's ``model_json_schema(by_alias=True)`` with the dialect named."""
    from webhook.policy.model import MigrationPolicy

    return {"$schema": DIALECT, **MigrationPolicy.model_json_schema(by_alias=True)}


def render() -> str:
    """The exact text of the committed schema file (stable key order, trailing newline)."""
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"


def run(args: argparse.Namespace) -> int:
    text = render()
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0
