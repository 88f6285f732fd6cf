"""``dra-webhook gates``: print the feature-gate catalogue, optionally next to a policy's settings.

Platform teams use it to see which DRA fields a policy lets through before they roll it out, and
what a Kubernetes upgrade (1.36 -> 1.37) changes in the defaults.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from webhook.rules.gates import GATES, VERSIONS, Gate


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "gates",
        help="print the feature-gate catalogue (stage, default, policy state, guarded fields)",
        description="Print the DRA/workload feature gates the webhook knows, with stage and default in "
        "the chosen Kubernetes version and, with --policy, the state the policy gives each gate.",
    )
    p.add_argument(
        "--version",
        choices=VERSIONS,
        default=None,
        help="Kubernetes version whose stages/defaults to show (default: the policy's "
        "spec.kubernetesVersion, else 1.37)",
    )
    p.add_argument("--policy", metavar="PATH", help="policy file or directory to show gate states for")
    p.set_defaults(func=run)


def _policy_state(gate: Gate, policy: Any) -> str:
    if policy is None:
        return ""
    state = "on" if policy.gates.get(gate.name, False) else "off"
    overridden = gate.name in policy.spec.featureGates
    return f"{state} (set)" if overridden else state


def rows(version: str, policy: Any = None) -> list[tuple[str, ...]]:
    """The table as text cells: gate, stage, default[, policy], guards."""
    out: list[tuple[str, ...]] = []
    for gate in GATES:
        stage = gate.stage_in(version)
        if stage is None:
            cells: tuple[str, ...] = (gate.name, "-", "n/a")
        else:
            locked = " (locked)" if stage.locked else ""
            cells = (gate.name, stage.stage, ("on" if stage.default else "off") + locked)
        if policy is not None:
            cells += (_policy_state(gate, policy),)
        out.append((*cells, gate.guards))
    return out


def _format(header: tuple[str, ...], body: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header) - 1)]
    lines = []
    for r in [header, *body]:
        cells = [c.ljust(w) for c, w in zip(r, widths, strict=False)] + [r[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    policy = None
    if getattr(args, "policy", None):
        try:
            from webhook.policy.loader import PolicyError, load
        except ImportError as exc:  # the loader is a separate module; say so rather than crash
            print(f"error: cannot load policies: {exc}", file=sys.stderr)
            return 2
        try:
            policy = load(args.policy)
        except (PolicyError, OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    version = args.version or (policy.spec.kubernetesVersion if policy is not None else "1.37")
    if policy is not None and policy.spec.kubernetesVersion != version:
        print(
            f"note: the policy targets Kubernetes {policy.spec.kubernetesVersion}; its gate states use "
            f"that version's defaults, the stage/default columns show {version}",
            file=sys.stderr,
        )
    header: tuple[str, ...] = ("GATE", f"STAGE {version}", "DEFAULT")
    if policy is not None:
        header += ("POLICY",)
    header += ("GUARDS",)
    print(_format(header, rows(version, policy)))
    return 0
