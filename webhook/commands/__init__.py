"""Subcommands of `dra-webhook`.

One module per verb, each with `add_parser(subparsers: Subparsers) -> None` and `run(args) -> int`.
A command that cannot do its job raises ``CliError`` (message and exit code); ``cli.main`` prints the
message on stderr and exits with the code, so every command fails the same way. Exit codes are one table,
``EXIT_CODES``, which ``dra-webhook --help`` prints.
"""

from __future__ import annotations

import argparse  # noqa: F401 - named in the alias below
import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from webhook.policy import delivery
    from webhook.policy.compiled import CompiledPolicy

#: What ``ArgumentParser.add_subparsers()`` returns (generic for type checkers only, hence a string).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

EXIT_OK = 0
EXIT_NO = 1
EXIT_INPUT = 2
EXIT_ASKED = 3
EXIT_INTERRUPTED = 130
EXIT_CODES = {
    EXIT_OK: "success: allowed, passed, nothing newly denied",
    EXIT_NO: "the answer is no (denied, a case failed, newly denied, policy errors in lint), or the cluster "
             "or the disk failed the command",
    EXIT_INPUT: "input, policy or usage error: a file, a policy or an argument is wrong (file:line says where)",
    EXIT_ASKED: "what an option asked to fail on (check --fail-on-unexamined or --fail-on-unknown-stage, "
                "preflight: a training job evicted with no window)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}
"""Every exit code a command returns, with what it means."""


class CliError(Exception):
    """A command that cannot do its job: ``message`` for stderr, ``code`` from ``EXIT_CODES``."""

    def __init__(self, message: str, code: int = EXIT_INPUT) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def load_policy(path: Path, what: str = "policy") -> CompiledPolicy:
    """The compiled policy at ``path`` (file or directory), or CliError listing each problem as file:line."""
    from webhook.policy.loader import PolicyError, load

    try:
        return load(path)
    except PolicyError as exc:
        raise CliError(f"{what} error:\n{exc}") from None


def webhook_delivery(config: Path | None) -> delivery.Delivery:
    """The namespaceSelectors of ``config``'s webhook configurations (``--webhook-config``), else the shipped ones:
    which namespaces the cluster sends to the webhook at all (``check``'s NOT SENT, ``audit``'s skips)."""
    from webhook.offline.inputs import InputError, read_items
    from webhook.policy import delivery

    if config is None:
        return delivery.shipped()
    try:
        return delivery.from_configs([i.request.object or {} for i in read_items(str(config), None, "CREATE")],
                                     str(config))
    except (OSError, ValueError, InputError) as exc:
        raise CliError(f"input error: --webhook-config {config}: {exc}") from None


def at_or_now(value: str | None) -> dt.datetime:
    """``--at`` as a UTC datetime, now when not given; a malformed date is an input error."""
    from webhook.offline.inputs import InputError, parse_at

    try:
        return parse_at(value) or dt.datetime.now(dt.UTC)
    except InputError as exc:
        raise CliError(f"input error: {exc}") from None


def exit_codes_text() -> str:
    """The table of ``EXIT_CODES`` for ``--help``."""
    return "exit codes:\n" + "\n".join(f"  {code:<3} {meaning}" for code, meaning in EXIT_CODES.items())


def write_json(doc: object) -> None:
    """``doc`` on stdout as indented JSON, as ``json.dumps(doc, indent=2)`` lays it out, written piece by piece:
    a top-level list (``preflight``'s Pods, ``report``'s namespaces) entry by entry, so the output never exists
    whole in memory; a top-level value that is an iterator (a generator) is written as the list it yields, so
    the entries need not exist together either. orjson encodes each piece; ``json.dumps`` with ``indent`` runs
    the pure-Python encoder and keeps every token as its own string first (7x the output at fleet scale)."""
    import sys

    out = sys.stdout
    for chunk in json_chunks(doc):
        out.write(chunk)
    out.write("\n")


def json_chunks(doc: object) -> Iterator[str]:
    """The pieces ``write_json`` writes (see there)."""
    import orjson

    def dumps(value: object, indent: str) -> str:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode().replace("\n", "\n" + indent)

    if not isinstance(doc, dict) or not doc:
        yield dumps(doc, "")
        return
    yield "{"
    for n, (key, value) in enumerate(doc.items()):
        yield ("," if n else "") + "\n  " + orjson.dumps(key).decode() + ": "
        if isinstance(value, Iterator) or (isinstance(value, list) and value):
            m = -1
            for m, item in enumerate(value):
                yield ("[" if m == 0 else ",") + "\n    " + dumps(item, "    ")
            yield "[]" if m < 0 else "\n  ]"
        else:
            yield dumps(value, "  ")
    yield "\n}"
