"""Peak RSS and wall time of `report` and `preflight` on a real API server, before and after streaming (#29).

A small probe until ``bench/scale.py`` lands: it starts etcd and kube-apiserver of ``shared/k8s`` (the e2e
harness, no scheduler or controller-manager), fills them with realistic Pods (about 9 KB stored: env,
labels, annotations, managedFields; bound to a fake Node; a quarter with an allocated, reserved
ResourceClaim, the rest requesting ``example.com/gpu``), then runs each command as its own process and
reads its peak RSS from ``wait4``. ``before`` runs the code of another checkout (``--before DIR``, e.g. the
main branch), ``after`` this one, ``floor`` a paged list keeping (namespace, name) per Pod.

Usage: ``python bench/stream_probe.py --pods 5000 [--pods 25000] [--before /work/main] [--repeat 2]``
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NAMESPACES = 10
FLOOR = """
import sys
from webhook import kube_api as cluster
from webhook import kube_lists
with cluster.connect(sys.argv[1]) as api:
    kept = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in kube_lists.stream(api, "pods")]
print(len(kept))
"""


def pod(ns: str, i: int, claim: bool) -> dict[str, Any]:
    env = [{"name": f"SETTING_{k:02d}", "value": f"value-{k:02d}-" + "x" * 70} for k in range(60)]
    container: dict[str, Any] = {"name": "trainer", "image": "registry.example.com/ml/trainer:2026.11.3",
                                 "env": env, "resources": {"requests": {"cpu": "4", "memory": "32Gi"},
                                                           "limits": {"cpu": "4", "memory": "32Gi"}}}
    spec: dict[str, Any] = {"nodeName": "e2e-dra-1", "containers": [container],
                            "terminationGracePeriodSeconds": 0}
    if claim:
        container["resources"]["claims"] = [{"name": "gpu"}]
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"c-{i}"}]
    else:
        container["resources"]["requests"]["example.com/gpu"] = "1"
        container["resources"]["limits"]["example.com/gpu"] = "1"
    path = "dra-claim" if claim else ("dra-extended-resource" if i % 3 else "device-plugin")
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec, "metadata": {
        "name": f"w-{i}", "namespace": ns,
        "labels": {"app.kubernetes.io/name": "trainer", "team": ns, "job": f"job-{i // 8}"},
        "annotations": {"dra-migration.io/path": path, "example.com/notes": "n" * 1500}}}


def claim(ns: str, i: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"c-{i}", "namespace": ns},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.example.com", "allocationMode": "ExactCount", "count": 1}}]}}}


def fill(api: Any, n: int, start: int) -> None:
    """Pods start..n-1 over NAMESPACES namespaces; every 4th with an allocated claim reserved for it."""
    from kubernetes import client

    core, res = client.CoreV1Api(api), client.ResourceV1Api(api)

    def one(i: int) -> None:
        ns = f"team-{i % NAMESPACES}"
        with_claim = i % 4 == 0
        if with_claim:
            res.create_namespaced_resource_claim(ns, claim(ns, i), _preload_content=False)
        created = core.create_namespaced_pod(ns, pod(ns, i, with_claim))
        if with_claim:
            status = {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com",
                                                                "pool": f"pool-{i % 50}", "device": f"gpu-{i % 8}"}]}},
                      "reservedFor": [{"resource": "pods", "name": created.metadata.name,
                                       "uid": created.metadata.uid}]}
            res.patch_namespaced_resource_claim_status(f"c-{i}", ns, {"status": status}, _preload_content=False)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for f in concurrent.futures.as_completed([pool.submit(one, i) for i in range(start, n)]):
            f.result()


def run_one(cwd: Path, argv: list[str]) -> tuple[float, float]:
    """Run ``argv`` in a fresh helper so RUSAGE_CHILDREN is that process's own peak."""
    code = ("import os, resource, subprocess, sys, time; t = time.monotonic(); "
            "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE); "
            "w = time.monotonic() - t; "
            "print(p.returncode, w, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024); "
            "sys.stderr.write(p.stderr.decode()[-300:] if p.returncode not in (0, 3) else '')")
    done = subprocess.run([sys.executable, "-c", code, sys.executable, *argv], cwd=cwd, capture_output=True,
                          text=True, check=True)
    rc, wall, rss = done.stdout.split()
    if int(rc) not in (0, 3):
        raise RuntimeError(f"{argv} in {cwd} failed ({rc}): {done.stderr}")
    return float(wall), float(rss)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, action="append", required=True, help="Pod counts, ascending")
    ap.add_argument("--before", type=Path, default=None, help="checkout with the code to compare against")
    ap.add_argument("--repeat", type=int, default=1, help="runs per command: the least wall time, the most RSS")
    args = ap.parse_args(argv)

    from kubernetes import client

    from tests.e2e import binaries, procs
    from tests.e2e.controlplane import ControlPlane

    workdir = Path(tempfile.mkdtemp(prefix="dra-stream-probe-"))
    try:
        bins = dataclasses.replace(binaries.find(), scheduler=None, controller_manager=None)
        cp = ControlPlane(bins, workdir / "cp")
        cp.start()
        api = cp.api()
        core = client.CoreV1Api(api)
        for k in range(NAMESPACES):
            core.create_namespace({"metadata": {"name": f"team-{k}"}})
            core.create_namespaced_service_account(f"team-{k}", {"metadata": {"name": "default"}})
        client.ResourceV1Api(api).create_device_class({"metadata": {"name": "gpu.example.com"}, "spec": {
            "extendedResourceName": "example.com/gpu",
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}})
        kubeconfig = str(cp.admin_kubeconfig)
        report = ["-m", "webhook", "report", "--kubeconfig", kubeconfig, "-o", "json"]
        pre = ["-m", "webhook", "preflight", "--driver", "gpu.example.com", "--taint-key",
               "example.com/maintenance", "-o", "json", "--kubeconfig", kubeconfig]
        done = 0
        print("| Pods | command | code | wall s | peak RSS MB |\n|---|---|---|---|---|", flush=True)
        for n in args.pods:
            t = time.monotonic()
            fill(api, n, done)
            done = n
            print(f"<!-- filled {n} Pods in {time.monotonic() - t:.0f} s -->", flush=True)
            rows = [("floor", ROOT, ["-c", FLOOR, kubeconfig])]
            for name, cwd in (("before", args.before), ("after", ROOT)):
                if cwd is not None:
                    rows += [(f"report {name}", cwd, report), (f"preflight {name}", cwd, pre)]
            for label, cwd, cmd in rows:
                runs = [run_one(cwd, cmd) for _ in range(args.repeat)]
                wall, rss = min(w for w, _ in runs), max(r for _, r in runs)
                command, _, code = label.partition(" ")
                print(f"| {n:,} | {command} | {code or '-'} | {wall:.1f} | {rss:.0f} |", flush=True)
        return 0
    finally:
        procs.stop_all()


if __name__ == "__main__":
    sys.exit(main())
