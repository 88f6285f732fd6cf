"""``dra-webhook`` with bench/proposals monkeypatched in: ``python bench/proposals/launch.py serve ...``."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent), str(HERE)]

from apply import install  # noqa: E402

from webhook.cli import main  # noqa: E402

if __name__ == "__main__":
    install()
    raise SystemExit(main(sys.argv[1:]))
