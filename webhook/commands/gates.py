"""``dra-webhook gates``: print the feature-gate catalogue, optionally next to a policy's settings.

Platform teams use it to see which DRA fields a policy lets through before they roll it out, and
what a Kubernetes upgrade (1.36 -> 1.37 -> 1.38) changes in the defaults. A version read from pre-releases
(``PROVISIONAL``: 1.38) is marked: its changed rows name their source, and a note says the rest are 1.37's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from webhook.commands import Subparsers, load_policy
from webhook.gates.catalogue import GATES, PROVISIONAL, VERSIONS, Gate


def add_parser(subparsers: Subparsers) -> None:
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
    p.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="also read the cluster's gate states (GET /metrics on the API server) and show, per gate, the "
        "cluster's value and the one in force (explicit policy value > cluster value for auto > default)",
    )
    p.set_defaults(func=run)


def _on(value: bool) -> str:
    return "on" if value else "off"


def _policy_state(gate: Gate, policy: Any) -> str:
    if policy is None:
        return ""
    sources = policy.gate_sources
    if gate.name in sources.explicit:
        return f"{_on(sources.explicit[gate.name])} (set)"
    if gate.name in sources.auto:
        return "auto"
    return _on(policy.gates.get(gate.name, False))


def _cluster_state(gate: Gate, version: str, cluster: Any) -> str:
    if gate.name not in cluster.enabled:
        return "- (not reported)"
    text = _on(cluster.enabled[gate.name])
    stage = gate.stage_in(version)
    needs = stage.runtime_config if stage is not None else None
    if cluster.enabled[gate.name] and needs and cluster.served and needs not in cluster.served:
        text += f"; {needs} not served"
    return text


def _in_force(gate: Gate, policy: Any, cluster: Any) -> str:
    from webhook.gates.cluster import in_force

    value, source = in_force(policy.gate_sources, cluster.enabled if cluster is not None else None, gate.name)
    return f"{_on(value)} ({source})"


def rows(version: str, policy: Any = None, cluster: Any = None) -> list[tuple[str, ...]]:
    """The table as text cells: gate, stage, default[, policy][, cluster, in force], guards."""
    out: list[tuple[str, ...]] = []
    for gate in GATES:
        stage = gate.stage_in(version)
        change = gate.change_in(version) if version in PROVISIONAL else None
        name = gate.name + (" *" if change is not None else "")
        if stage is None:
            cells: tuple[str, ...] = (name, "-", "n/a" if change is None else "removed")
        else:
            locked = " (locked)" if stage.locked else ""
            cells = (name, stage.stage, ("on" if stage.default else "off") + locked)
        if policy is not None:
            cells += (_policy_state(gate, policy),)
        if cluster is not None:
            cells += (_cluster_state(gate, version, cluster),)
            if policy is not None:
                cells += (_in_force(gate, policy, cluster),)
        guards = gate.guards if change is None else f"{gate.guards} [provisional: {change.source}]"
        out.append((*cells, guards))
    return out


def _read_cluster(kubeconfig: str) -> Any:
    """The cluster's gate reading, or a one-line error on stderr and None."""
    from webhook.cluster.api import ClusterError, connect, describe_error, read_feature_gates

    try:
        return read_feature_gates(connect(kubeconfig))
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
    except Exception as exc:  # 403 without the /metrics rule, connection refused, not an API server
        print(f"error: cannot read the cluster's feature gates from /metrics: {describe_error(exc)}", file=sys.stderr)
    return None


def _format(header: tuple[str, ...], body: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header) - 1)]
    lines = []
    for r in [header, *body]:
        cells = [c.ljust(w) for c, w in zip(r, widths, strict=False)] + [r[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    policy = load_policy(Path(args.policy)) if getattr(args, "policy", None) else None
    version = args.version or (policy.spec.kubernetesVersion if policy is not None else "1.37")
    if policy is not None and policy.spec.kubernetesVersion != version:
        print(
            f"note: the policy targets Kubernetes {policy.spec.kubernetesVersion}; its gate states use "
            f"that version's defaults, the stage/default columns show {version}",
            file=sys.stderr,
        )
    cluster = None
    if getattr(args, "kubeconfig", None):
        cluster = _read_cluster(args.kubeconfig)
        if cluster is None:
            return 2
    header: tuple[str, ...] = ("GATE", f"STAGE {version}", "DEFAULT")
    if policy is not None:
        header += ("POLICY",)
    if cluster is not None:
        header += ("CLUSTER", "IN FORCE") if policy is not None else ("CLUSTER",)
    header += ("GUARDS",)
    print(_format(header, rows(version, policy, cluster)))
    if version in PROVISIONAL:
        print(f"\n* provisional: Kubernetes {version} is not released; the rows marked * are read from its "
              "pre-release changelog, the others are assumed unchanged from the version before")
    return 0
