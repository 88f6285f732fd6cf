"""Where the bundled default policy is when the user does not say."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def default_policy() -> Path:
    """The bundled default policy: $DRA_WEBHOOK_POLICY, else the repository's policies/default.yaml."""
    env = os.environ.get("DRA_WEBHOOK_POLICY")
    if env:
        return Path(env)
    return REPO / "policies" / "default.yaml"
