"""Peak memory of one `serve` replica under worst-case reviews (issue 47 item 1).

Starts the real server (`dra-webhook serve`: gunicorn over TLS, ``--workers`` x ``--threads``, offline, the live
test policy) from ``--root`` (default: this checkout; point it at another worktree to measure another version),
then for each case posts ``--concurrency`` copies of the review at once and samples the PSS of the master and its
workers (``/proc/<pid>/smaps_rollup``; PSS shares pages among the processes, so the sum is what the replica
costs) every few milliseconds. After each case it waits for the replica to settle and reads what stayed resident,
and posts one normal GPU Pod review, which must be answered with its patch (the server stayed up).

Cases (what the API server can send: object and oldObject at its 3 MiB request limit; and what any caller can):
  flat   7 MiB review whose Pod holds a flat list of empty objects (the most Python objects per byte)
  crd    UPDATE of a JobSet with a 3 MiB object and a 3 MiB oldObject (one-key objects in an unvalidated field)
  env    a Pod with 3 MiB of env entries
  deep   a Pod with a field nested 1,000 levels
  limit  the costliest review within the structural budget (598,000 values in one-key objects, 2.3 MiB)
  mixed  the four above at once
Usage: ``python bench/memory.py [--root DIR] [--cases flat,crd,env,deep,mixed] [--concurrency 4]``.
Figures: bench/history/memory-per-request.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024
POLICY = ROOT / "tests" / "data" / "live-policy.yaml"
NAMESPACE = "pilot-a"  # pilot stage under the live policy: GPU Pods are steered (a patch)


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"containers": [{"name": "main", "image": "registry.example.com/train:1",
                                     "resources": {"limits": {"example.com/gpu": 1}}}]}}


def _review(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
            group: str = "", version: str = "v1") -> dict[str, Any]:
    kind = obj["kind"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "name": obj["metadata"]["name"], "namespace": NAMESPACE, "operation": operation,
        "userInfo": {"username": "bench"}, "object": obj, "oldObject": old, "dryRun": False}}


def _fill(doc: dict[str, Any], placeholder: str, value: bytes) -> bytes:
    return json.dumps(doc).encode().replace(json.dumps(placeholder).encode(), value, 1)


def flat() -> bytes:
    pod = _pod("flat")
    pod["spec"]["containers"][0]["extra"] = "FILL"
    envelope = len(_fill(_review(pod), "FILL", b"[]"))
    n = (7 * MiB - envelope) // 3
    return _fill(_review(pod), "FILL", b"[" + b",".join([b"{}"] * n) + b"]")


def crd() -> bytes:
    def jobset(fill: str) -> dict[str, Any]:
        return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": "big", "namespace": NAMESPACE},
                "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {"template": {
                    "spec": {"containers": _pod("x")["spec"]["containers"], "restartPolicy": "Never"}}}}}],
                         "extra": fill}}
    items = b"[" + b",".join([b'{"a":1}'] * ((3 * MiB - 4096) // 8)) + b"]"
    doc = _review(jobset("NEW"), "UPDATE", jobset("OLD"), group="jobset.x-k8s.io", version="v1alpha2")
    return json.dumps(doc).encode().replace(b'"NEW"', items, 1).replace(b'"OLD"', items, 1)


def env() -> bytes:
    pod = _pod("env")
    n = 3 * MiB // len(b'{"name":"E0000000","value":"v"},')
    pod["spec"]["containers"][0]["env"] = [{"name": f"E{i:07d}", "value": "v"} for i in range(n)]
    return json.dumps(_review(pod), separators=(",", ":")).encode()


def limit() -> bytes:
    """The costliest review within the structural budget: one-key objects (about 100 bytes each parsed), just under
    webhook.admission.budget.MAX_VALUES (each is two values: the object and its member's value)."""
    pod = _pod("limit")
    pod["spec"]["containers"][0]["extra"] = "FILL"
    return _fill(_review(pod), "FILL", b"[" + b",".join([b'{"a":1}'] * 299_000) + b"]")


def deep() -> bytes:
    pod = _pod("deep")
    pod["spec"]["containers"][0]["extra"] = "FILL"
    return _fill(_review(pod), "FILL", b'{"x":' * 999 + b"{}" + b"}" * 999)


CASES = {"flat": [flat], "crd": [crd], "env": [env], "deep": [deep], "limit": [limit],
         "mixed": [flat, crd, env, deep]}


def _kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def replica_pss(pid: int) -> int:
    """PSS in bytes of the master and its children (the workers)."""
    return sum(_kb(p) for p in [pid, *_children(pid)]) * 1024


class Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.running = pid, 0, True

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, replica_pss(self.pid))
            time.sleep(0.005)


def post(port: int, body: bytes, out: list[Any]) -> None:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=120)
    try:
        conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        out.append(_outcome(resp.status, data))
    except (OSError, http.client.HTTPException) as exc:
        out.append(f"error {type(exc).__name__}")
    finally:
        conn.close()


def _outcome(status: int, data: bytes) -> str:
    try:
        doc = json.loads(data)
    except ValueError:
        return f"HTTP {status} (not JSON)"
    if status != 200:
        return f"HTTP {status}"
    r = doc["response"]
    if not r["allowed"]:
        return f"denied {r['status']['code']}"
    if r.get("warnings"):
        return "allowed, warned" + (", patched" if "patch" in r else ", NOT patched")
    return "allowed" + (", patched" if "patch" in r else "")


def start(root: Path, work: Path, workers: int, threads: int) -> tuple[subprocess.Popen[bytes], int]:
    listener = socket.create_server(("127.0.0.1", 0), backlog=128)
    listener.set_inheritable(True)
    port = listener.getsockname()[1]
    policy = work / "policy"
    policy.mkdir()
    (policy / "policy.yaml").write_bytes(POLICY.read_bytes())
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(work / "metrics"), PYTHONPATH=str(root))
    env.pop("KUBECONFIG", None)
    (work / "metrics").mkdir()
    with listener:
        proc = subprocess.Popen(
            [sys.executable, "-m", "webhook", "serve", "--dev-certs", "--cert-dir", str(work / "certs"), "--policy",
             str(policy), "--bind", f"fd://{listener.fileno()}", "--workers", str(workers), "--threads",
             str(threads), "--offline"], cwd=root, env=env, stdout=(work / "server.log").open("wb"),
            stderr=subprocess.STDOUT, pass_fds=[listener.fileno()])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out: list[Any] = []
        post(port, json.dumps(_review(_pod("warm"))).encode(), out)
        if out and out[0].startswith("allowed"):
            return proc, port
        time.sleep(0.2)
    raise SystemExit(f"server not up:\n{(work / 'server.log').read_text()[-3000:]}")


def settle(pid: int, seconds: float = 3.0) -> int:
    """PSS once the replica is idle again (the lowest of a few samples)."""
    end, low = time.monotonic() + seconds, replica_pss(pid)
    while time.monotonic() < end:
        time.sleep(0.2)
        low = min(low, replica_pss(pid))
    return low


def run_case(proc: subprocess.Popen[bytes], port: int, builders: list[Any], concurrency: int) -> dict[str, Any]:
    bodies = [builders[i % len(builders)]() for i in range(max(concurrency, len(builders)))]
    before = settle(proc.pid, 1.0)
    sampler = Sampler(proc.pid)
    sampler.start()
    outcomes: list[Any] = []
    started = time.monotonic()
    posts = [threading.Thread(target=post, args=(port, b, outcomes)) for b in bodies]
    for t in posts:
        t.start()
    for t in posts:
        t.join()
    took = time.monotonic() - started
    sampler.running = False
    sampler.join()
    after = settle(proc.pid)
    normal: list[Any] = []
    post(port, json.dumps(_review(_pod("next"))).encode(), normal)
    return {"before": before, "peak": sampler.peak, "after": after, "outcomes": sorted(outcomes), "seconds": took,
            "next": normal[0] if normal else "no answer", "sizes": sorted({len(b) for b in bodies}),
            "alive": proc.poll() is None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=ROOT, help="checkout whose webhook is served (default: this one)")
    p.add_argument("--cases", default="flat,crd,env,deep,limit,mixed")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=8)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    commit = subprocess.run(["git", "-C", str(args.root), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"root {args.root} ({commit}); {args.workers} workers x {args.threads} threads; "
          f"{args.concurrency} reviews at once; {os.cpu_count()} cores")
    print("| case | body | idle before | peak | resident after | answers | next normal review | s |")
    print("|---|---|---|---|---|---|---|---|")
    proc, port = start(args.root, work, args.workers, args.threads)
    try:
        for name in args.cases.split(","):
            r = run_case(proc, port, CASES[name], args.concurrency)
            sizes = ", ".join(f"{s / MiB:.1f}" for s in r["sizes"])
            answers = "; ".join(f"{n}x {o}" for o in sorted(set(r["outcomes"]))
                                for n in [r["outcomes"].count(o)])
            print(f"| {name} | {sizes} MiB | {r['before'] / 1e6:.0f} MB | **{r['peak'] / 1e6:.0f} MB** | "
                  f"{r['after'] / 1e6:.0f} MB | {answers} | {r['next']}{'' if r['alive'] else ' (SERVER DIED)'} | "
                  f"{r['seconds']:.1f} |", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
