"""Render docs/dashboard.png: the migration panels of deploy/monitoring/dashboard.json, drawn from a scenario.

Grafana does not run here, so this replays a four-week migration of two cohorts through the real gauge code
(``webhook.fleet.gauges.samples`` over Pods and claims built like the tests build them), evaluates each panel's
query the way Prometheus would (max across replicas, then sum by the panel's labels) and plots it.

    .venv/bin/pip install matplotlib && .venv/bin/python docs/dashboard.py
"""

from __future__ import annotations

import datetime as dt
import random
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tests.fakeapi import device_class, exact_request, make_policy, namespace, pod, resource_claim  # noqa: E402
from webhook.fleet import gauges  # noqa: E402

PATH = "dra-migration.io/path"
EXT = {"extendedResourceClaimStatus": {"resourceClaimName": "x", "requestMappings": [
    {"containerName": "main", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"}]}}
START = dt.datetime(2027, 1, 8, 12, tzinfo=dt.UTC)
DAYS = 28
COLORS = {"device-plugin": "#8c8c8c", "dra-extended-resource": "#1f77b4", "dra-claim": "#2ca02c",
          "mixed": "#d62728", "pending": "#ffbf00"}


def cluster_on(day: int, rng: random.Random) -> gauges.ClusterObjects:
    """Pods and claims on ``day``: pilot-teams (ml-*) moves to DRA from day 0, research (lab) from 2027-01-15;
    a node pool change on days 12-16 leaves some DRA-intended Pods on the device plugin (drift)."""
    pods, claims = [], []

    def add(ns: str, i: int, intended: str, actual: str) -> None:
        name = f"w-{i}"
        if actual == "dra-claim":
            p = pod(ns, name, claims=[("gpu", "gpu-template")], annotations={PATH: intended})
            claims.append(resource_claim(ns, f"{name}-gpu", requests=[exact_request("gpu", "gpu.example.com")],
                                         annotations={"dra-migration.io/tolerations-injected": "1"}))
        else:
            status = EXT if actual == "dra-extended-resource" else None
            p = pod(ns, name, requests={"example.com/gpu": 1}, annotations={PATH: intended}, status=status)
        pods.append(p)

    share = min(1.0, 0.1 + day / 22)  # pilot-teams: share of Pods the webhook steers to DRA
    for i in range(60):
        ns = "ml-train" if i % 2 else "ml-serve"
        if rng.random() < share:
            path = "dra-claim" if i % 5 == 0 else "dra-extended-resource"
            drifted = 12 <= day <= 16 and i % 7 == 0 and path == "dra-extended-resource"
            add(ns, i, path, "device-plugin" if drifted else path)
        else:
            add(ns, i, "device-plugin", "device-plugin")
    research = max(0.0, (day - 7) / 18)  # research: pilot from 2027-01-15 (day 7)
    for i in range(30):
        if rng.random() < research:
            add("lab", i, "dra-extended-resource", "dra-extended-resource")
        else:
            add("lab", i, "device-plugin", "device-plugin")
    return gauges.ClusterObjects(
        [namespace("ml-train"), namespace("ml-serve"), namespace("lab", {"division": "research"})],
        pods, claims, [device_class("gpu.example.com", "example.com/gpu")])


def main() -> None:
    policy = make_policy()
    rng = random.Random(19)
    series: dict[str, dict[tuple, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0] * DAYS))
    times = []
    for day in range(DAYS):
        now = START + dt.timedelta(days=day)
        times.append(now)
        for name, labels, value in gauges.samples(policy, now, cluster_on(day, rng)):
            if name == "dra_webhook_migration_pods":
                series["paths"][(labels["cohort"], labels["actual"])][day] += value
            elif name == "dra_webhook_migration_drifted_pods":
                series["drift"][(labels["cohort"],)][day] += value
            elif name == "dra_webhook_migration_taint_unevictable_pods":
                series["unevictable"][(labels["cohort"],)][day] += value
            elif name == "dra_webhook_migration_claims_injected_tolerations":
                series["injected"][(labels["cohort"],)][day] += value
            elif name == "dra_webhook_migration_next_stage_change_timestamp_seconds":
                series["next"][(labels["cohort"], labels["stage"])][day] = (value - now.timestamp()) / 86400
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5), constrained_layout=True)
    fig.suptitle("DRA migration webhook: migration panels (rendered from the live gauges over a 4-week scenario)",
                 fontsize=13)
    for ax, cohort in zip(axes[0][:2], ("pilot-teams", "research"), strict=True):
        paths = [p for p in COLORS if any(series["paths"][(cohort, p)])]
        ax.stackplot(times, [series["paths"][(cohort, p)] for p in paths], labels=paths,
                     colors=[COLORS[p] for p in paths], alpha=0.85)
        ax.set_title(f"GPU Pods by actual path: {cohort}")
        ax.legend(loc="upper left", fontsize=8)
    _lines(axes[0][2], times, series["drift"], "Drifted Pods (intended path != actual)")
    _lines(axes[1][0], times, series["unevictable"], "Pods a NoExecute device taint would not evict (k/k 141290)")
    _lines(axes[1][1], times, series["injected"], "Claims with injected tolerations")
    ax = axes[1][2]
    for (cohort, stage), values in sorted(series["next"].items()):
        pts = [(t, v) for t, v in zip(times, values, strict=True) if v > 0]
        if pts:
            ax.plot([t for t, _ in pts], [v for _, v in pts], marker=".", label=f"{cohort} -> {stage}")
    ax.axhline(1, color="#d62728", linestyle="--", linewidth=1, label="alert: due within 24 h")
    ax.set_title("Days to the next stage change")
    ax.legend(loc="upper right", fontsize=8)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.set_xlim(times[0], times[-1])
    out = ROOT / "docs" / "dashboard.png"
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


def _lines(ax, times, data, title) -> None:  # noqa: ANN001
    for (cohort,), values in sorted(data.items()):
        ax.plot(times, values, label=cohort)
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", fontsize=8)


if __name__ == "__main__":
    main()
