"""`dra-webhook audit` against `dra-webhook report` on the same cluster, in the same run (issue 49 item 1).

The cluster is the fake API server of the tests (tests/fakeapi.py: real JSON over real HTTP, paged lists, watches),
filled in-process with the fleet of bench/fleet.py: Pods shaped like the Triton chart's (about 9 KB each with their
status), a quarter with an allocated ResourceClaim, an eighth each on the extended-resource and the device-plugin
path, Namespaces of the three kinds (``ml-*`` pilot-teams, ``research-*``, ``team-*``), 8-GPU ResourceSlices; and
beside them one Deployment per 10 Pods, made from a Pod's template. The fleet's ReplicaSet owner references are
dropped, so ``audit`` judges every Pod (its worst case: owned Pods are skipped without a judgement).

Each command runs as a child (bench/scale.py ``measure``: wall time, peak RSS from ``wait4``), ``-o json`` on
``--at 2027-03-01`` with ``policies/default.yaml``, report first, then audit. The fake answers a list page from a
sorted key list without copying the store (its test version copies every object for every page), so the server
costs both commands alike; it is in this process, on its own threads, not in the children measured.

Usage: ``python bench/audit.py [--sizes 10000,100000] [--per-namespace 500]``; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import fleet  # noqa: E402 - bench/ is not a package; the path is set just above
import scale  # noqa: E402

from tests import fakeapi  # noqa: E402

AT = "2027-03-01"
PER_DEPLOYMENT = 10


def _fast_list(self: Any, kind: fakeapi.Kind, namespace: str | None, query: dict[str, str]) -> None:
    """The fake's list, paged from a sorted key list, objects sent as stored (nothing mutates them)."""
    api = self.api
    with api._lock:
        store = api._store[kind.resource]
        keys = api._sorted.get(kind.resource)
        if keys is None or len(keys) != len(store):
            keys = api._sorted[kind.resource] = sorted(store)
        if namespace is not None:
            keys = [k for k in keys if k[0] == namespace]
        start, limit = int(query.get("continue") or 0), int(query.get("limit") or 0)
        end = start + limit if limit else len(keys)
        items = [store[k] for k in keys[start:end]]
        meta: dict[str, Any] = {"resourceVersion": str(api._rv)}
        if end < len(keys):
            meta["continue"] = str(end)
            meta["remainingItemCount"] = len(keys) - end
    self._json(200, {"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": meta, "items": items})


def _store(fake: fakeapi.FakeAPI, resource: str, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    meta.setdefault("uid", str(uuid.uuid4()))
    meta.setdefault("resourceVersion", "1")
    meta.setdefault("creationTimestamp", "2026-09-01T00:00:00Z")
    fake._store[resource][(meta.get("namespace", ""), meta["name"])] = obj


def deployment(i: int, template_pod: dict[str, Any]) -> dict[str, Any]:
    meta = template_pod["metadata"]
    spec = {k: v for k, v in template_pod["spec"].items() if k != "nodeName"}
    labels = dict(meta["labels"])
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": f"triton-deploy-{i:07d}", "namespace": meta["namespace"], "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": labels["app"]}},
                     "template": {"metadata": {"labels": labels}, "spec": spec}}}


def fill(fake: fakeapi.FakeAPI, pods: int, per_namespace: int) -> None:
    """The fleet of ``pods`` Pods (see the module docstring), written straight into the fake's store."""
    for name in fleet.namespaces(pods, per_namespace):
        _store(fake, "namespaces", fleet.namespace(name))
    _store(fake, "deviceclasses", fleet.device_class())
    for n in range(fleet.dra_nodes(pods)):
        _store(fake, "resourceslices", fleet.resource_slice(fleet.dra_node_name(n)))
    for i in range(pods):
        p = fleet.pod(i, per_namespace)
        del p["metadata"]["ownerReferences"]
        p.update(fleet.pod_status(i, "2026-09-01T00:00:00Z"))
        _store(fake, "pods", p)
        if i % PER_DEPLOYMENT == 0:
            _store(fake, "deployments", deployment(i, p))
        if fleet.kind(i) == fleet.CLAIMED:
            c = fleet.claim(i, per_namespace)
            c.update(fleet.claim_status(i, per_namespace, p["metadata"]["uid"]))
            _store(fake, "resourceclaims", c)


def measure_size(size: int, per_namespace: int, work: Path) -> dict[str, Any]:
    fakeapi._Handler._list = _fast_list  # type: ignore[method-assign]
    with fakeapi.FakeAPI() as fake:
        fake._sorted = {}  # type: ignore[attr-defined]
        fill(fake, size, per_namespace)
        kubeconfig = fake.write_kubeconfig(work)
        env = scale.child_env()
        common = ("--kubeconfig", kubeconfig, "--policy", str(ROOT / "policies" / "default.yaml"), "-o", "json",
                  "--at", AT, "-q")
        runs = {name: scale.measure(scale.webhook_argv(name, *common), env, work, f"{name}-{size}")
                for name in ("report", "audit")}
    judged = json.loads((work / f"audit-{size}.out").read_text())
    objects = len(judged["objects"])
    return {"size": size, "deployments": -(-size // PER_DEPLOYMENT), "judged": objects,
            **{f"{k}_{n}": getattr(r, k) for n, r in runs.items() for k in ("wall", "peak_mb", "rc", "out_bytes")},
            "notes": {n: r.note for n, r in runs.items() if r.note}}


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["| Pods | Deployments | objects judged | report s | audit s | time x | report MB | audit MB | memory x |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['size']:,} | {r['deployments']:,} | {r['judged']:,} | {r['wall_report']:.1f} | "
                     f"{r['wall_audit']:.1f} | {r['wall_audit'] / r['wall_report']:.2f} | {r['peak_mb_report']:.0f} | "
                     f"{r['peak_mb_audit']:.0f} | {r['peak_mb_audit'] / r['peak_mb_report']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000", help="Pod counts, comma-separated (default 10000)")
    p.add_argument("--per-namespace", type=int, default=500, help="Pods per namespace (default 500)")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            row = measure_size(size, args.per_namespace, Path(tmp))
            print(json.dumps(row), file=sys.stderr)  # noqa: T201 - a bench prints
            rows.append(row)
    sys.stdout.write(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
