"""Subcommands of `dra-webhook`.

One module per verb, each with `add_parser(subparsers) -> None` and `run(args) -> int`.
"""
