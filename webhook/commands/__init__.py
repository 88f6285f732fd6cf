"""Subcommands of `dra-webhook`.

One module per verb, each with `add_parser(subparsers: Subparsers) -> None` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse  # noqa: F401 - named in the alias below
from typing import TypeAlias

#: What ``ArgumentParser.add_subparsers()`` returns (generic for type checkers only, hence a string).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
