"""What the compiled policies cost inside the API server per GPU Pod, by the API server's own clock (issue 28 item 5).

bench/apiserver.py times Pod creates from the client, which on a busy shared machine mostly measures the machine.
This reads what kube-apiserver itself records for each admission policy it evaluates
(``apiserver_validating_admission_policy_check_duration_seconds`` and
``apiserver_mutating_admission_policy_check_duration_seconds``: the CEL of one policy and binding on one request;
on v1.36.2 only the mutating one had samples for these requests, where no validation fails, so the figures are the
MutatingAdmissionPolicies' time),
for the same set-ups as bench/apiserver.py: ``policies`` (the hand-written VAP+MAP pair) and ``compiled`` (what
``dra-webhook compile`` prints for ``policies/default.yaml``: the objects alone, bench/apiserver.py's
``compiled-objects``; no webhook runs here, and the narrowed webhooks are not called for this GPU Pod), and
optionally ``compiled@DIR`` (the same command run in another checkout, e.g. the code before a change). Each round
applies one set-up alone (seeded order), makes sure it acts, sends ``--pods`` dry-run GPU Pods in namespace
``ml-bench`` (pilot stage), and adds up the policies' duration sums over those requests.

Besides each policy's own histogram, it reports each admission plugin's whole time per Pod
(``apiserver_admission_controller_admission_duration_seconds``): for a ValidatingAdmissionPolicy that includes its
matchConditions, variables, validations, messageExpressions and audit annotations whether or not one failed.
And kube-apiserver's whole CPU time per Pod (user + system, /proc), against the set-up ``none`` (no policy) in the
same round: the plugins' clocks leave out the garbage collector, which the policies' allocations keep busy, and
CPU is what eight clients at once share (bench/apiserver.py's 8-way rows).
``--set NAME=FILE`` times any other objects (e.g. a hand-edited ``compile -o json`` to measure one part);
``--profile DIR`` also writes kube-apiserver's CPU profile per set-up.

Usage: ``python bench/policy_cost.py [--rounds N] [--pods N] [--baseline DIR] [--set NAME=FILE ...]
[--profile DIR] [--scheduler NAME]``; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import apiserver as ab  # noqa: E402

METRICS = ("apiserver_validating_admission_policy_check_duration_seconds",
           "apiserver_mutating_admission_policy_check_duration_seconds")
PLUGINS = "apiserver_admission_controller_admission_duration_seconds"
"""Each admission plugin's time per request (k8s.io/apiserver/pkg/admission/metrics/metrics.go,
``controllerAdmissionLatency``): the ValidatingAdmissionPolicy plugin's includes every policy's matchConditions,
variables, validations and messageExpressions, recorded whether or not a validation failed."""


PLUGIN_KEYS = ("plugin MutatingAdmissionPolicy", "plugin ValidatingAdmissionPolicy", "plugin MutatingAdmissionWebhook",
               "plugin ValidatingAdmissionWebhook")
_SERIES = [(f"{metric}{part}", at, label, key)
           for metric, label, key in ((METRICS[0], r'policy="([^"]+)"', ""), (METRICS[1], r'policy="([^"]+)"', ""),
                                      (PLUGINS, r'name="(\w*Admission(?:Policy|Webhook))"', "plugin "))
           for part, at in (("_sum{", 0), ("_count{", 1))]
"""(line prefix, 0 for the seconds or 1 for the evaluations, label regex, key prefix) of each series read."""


def policy_seconds(api: ab.Api) -> dict[str, tuple[float, float]]:
    """Policy name (or ``plugin <name>``, ``PLUGIN_KEYS``) -> (seconds, evaluations), summed over the other labels."""
    status, text = api.once("GET", "/metrics")
    assert status == 200, f"GET /metrics: {status}"
    out: dict[str, list[float]] = {}
    for line in str(text).splitlines():
        for prefix, at, label, key in _SERIES:
            found = re.search(label, line) if line.startswith(prefix) else None
            if found:
                out.setdefault(key + found.group(1), [0.0, 0.0])[at] += float(line.rsplit(" ", 1)[1])
    return {k: (v[0], v[1]) for k, v in out.items()}


def _acts(api: ab.Api, objs: list[dict[str, Any]]) -> bool:
    """A dry-run GPU Pod gets the set-up's annotation (both sets write ``dra-migration.io/stage``), or, for a set
    without a MutatingAdmissionPolicy (``--set``), a Pod asking for the legacy name, or the GPU Pod, is warned or
    refused."""
    if any(o["kind"] == "MutatingAdmissionPolicy" for o in objs):
        status, body, _ = api.dry_run(f"/api/v1/namespaces/{ab.NAMESPACE}/pods", ab.pod("gpu"))
        return status == 201 and "dra-migration.io/stage" in (body.get("metadata", {}).get("annotations") or {})
    legacy = ab.pod("gpu")
    legacy["spec"]["containers"][0]["resources"]["limits"] = {"vendor.example.com/gpu": "1"}
    for probe in (legacy, ab.pod("gpu")):
        status, _, warnings = api.dry_run(f"/api/v1/namespaces/{ab.NAMESPACE}/pods", probe)
        if status != 201 or warnings:
            return True
    return False


def _apply(bench: ab.Bench, objs: list[dict[str, Any]], present: bool) -> None:
    if not objs:  # the set-up "none"
        return
    bench._ensure(objs, present)
    deadline = time.monotonic() + 60
    while _acts(bench.api, objs) != present:
        assert time.monotonic() < deadline, "set-up not in effect after 60 s"
        time.sleep(0.2)


def _profile(bench: ab.Bench, objs: list[dict[str, Any]], out: Path, seconds: int, connections: int) -> None:
    """kube-apiserver's CPU profile over ``seconds`` of dry-run GPU Pods (``connections`` at once) with ``objs`` alone:
    where the API server spends a Pod's admission (e.g. `go tool pprof -lines -peek 'ForInput' FILE` separates a
    ValidatingAdmissionPolicy's validations, messageExpressions and audit annotations by line)."""
    api = bench.api
    _apply(bench, objs, True)
    stop = threading.Event()
    body = json.dumps(ab.pod("gpu")).encode()

    sent = [0]

    def load() -> None:
        conn = api.connect()
        while not stop.is_set():
            assert api.call(conn, "POST", f"/api/v1/namespaces/{ab.NAMESPACE}/pods?dryRun=All", body)[0] == 201
            sent[0] += 1

    threads = [threading.Thread(target=load) for _ in range(connections)]
    for t in threads:
        t.start()
    try:
        status, raw = api.call(api.connect(), "GET", f"/debug/pprof/profile?seconds={seconds}")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert status == 200, f"GET /debug/pprof/profile: {status}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(raw)
    ab.log(f"profile: {out} ({sent[0]} Pods)")
    _apply(bench, objs, False)


def narrowed_webhooks(ca: Path) -> list[dict[str, Any]]:
    """deploy/base's webhook configurations narrowed for the bench's policy (the compiled mode's), their service
    replaced by a URL where nothing listens: a Pod the narrowing sends would cost a refused connection (failurePolicy
    Ignore), so a GPU Pod it does not send (``--switch-off unsatisfiable-claim``) is timed with only what the API
    server does to decide that."""
    import base64

    import yaml

    shipped = [d for d in yaml.safe_load_all((ab.ROOT / "deploy" / "base" / "webhooks.yaml").read_text()) if d]
    bundle = base64.b64encode(Path(ca).read_bytes()).decode()
    out = ab.narrowed_configs(shipped)
    for cfg in out:
        for hook in cfg["webhooks"]:
            hook["clientConfig"] = {"url": f"https://127.0.0.1:9/{hook['name']}", "caBundle": bundle}
            hook["failurePolicy"] = "Ignore"
    return out


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time (/proc/PID/stat fields 14 and 15): everything kube-apiserver spends,
    garbage collection included, which the admission plugins' own clocks leave out."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--pods", type=int, default=100, help="dry-run GPU Pods per round and set-up")
    ap.add_argument("--baseline", type=Path, help="another checkout whose `compile` output is timed too")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=FILE",
                    help="another set-up: admission policies and bindings as JSON (a list, or `compile -o json`)")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="also write a CPU profile of kube-apiserver per set-up (DIR/<set-up>.pb.gz, `go tool pprof`), "
                         "taken over a further --profile-seconds of dry-run GPU Pods after the rounds")
    ap.add_argument("--profile-seconds", type=int, default=20)
    ap.add_argument("--profile-connections", type=int, default=2,
                    help="connections sending Pods while profiling (1: the samples divided by the Pods sent, which "
                         "the log line names, are CPU per Pod)")
    ap.add_argument("--settle", type=float, default=2.0,
                    help="seconds to wait after a set-up is in effect before its Pods are sent, so the API server's "
                         "own work on the applied objects is not counted as the Pods' CPU (default %(default)s)")
    ap.add_argument("--narrowed", action="store_true",
                    help="also time compiled+narrowed: the compiled objects beside the webhook configurations narrowed "
                         "for the policy (the compiled mode); with --switch-off unsatisfiable-claim they do not send "
                         "the GPU Pod, and the plugin rows show what the two webhook plugins spend deciding that")
    ap.add_argument("--switch-off", action="append", default=[], metavar="RULE",
                    help="a variant of policies/default.yaml with RULE Off in every stage, for every set-up (as "
                         "bench/apiserver.py --switch-off)")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--scheduler", default=ab.SCHEDULER,
                    help="the GPU Pod's schedulerName (default %(default)s, which the policy steers to the dra pool; "
                         "a name outside its draSchedulers, e.g. bench-not-scheduled, times a Pod it warns about)")
    args = ap.parse_args(argv)
    ab.SCHEDULER = args.scheduler  # what ab.pod writes; no scheduler runs here either way
    if args.switch_off:
        ab.POLICY = ab._switched_off(ab.POLICY, args.switch_off, Path(tempfile.mkdtemp()) / "policy.yaml")

    from tests.e2e import binaries, procs
    from tests.e2e.controlplane import ControlPlane

    workdir = Path(tempfile.mkdtemp(prefix="dra-policy-cost-"))
    try:
        cp = ControlPlane(dataclasses.replace(binaries.find(), scheduler=None, controller_manager=None), workdir,
                          profiling=args.profile is not None)
        cp.start()
        api = ab.Api.of(cp.server, cp.pki.ca, cp.pki.dir / "admin.crt", cp.pki.dir / "admin.key")
        for path, obj in (("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": ab.NAMESPACE}}),
                          (f"/api/v1/namespaces/{ab.NAMESPACE}/serviceaccounts",
                           {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})):
            assert api.once("POST", path, obj)[0] == 201
        bench = ab.Bench(api, [], [], [], [], lambda: {})
        pid = cp.processes["kube-apiserver"].popen.pid
        sets = {"none": [], "policies": ab.policy_pair(ab._served_map_version(api)),
                "compiled": ab.compile_objects(cp.admin_kubeconfig)}
        if args.narrowed:
            sets["compiled+narrowed"] = sets["compiled"] + narrowed_webhooks(cp.pki.ca)
        if args.baseline:
            sets[f"compiled@{args.baseline.name}"] = ab.compile_objects(cp.admin_kubeconfig, args.baseline)
        for spec in args.set:
            name, _, file = spec.partition("=")
            loaded = json.loads(Path(file).read_text())
            sets[name] = list(loaded["items"] if isinstance(loaded, dict) else loaded)
        per_pod: dict[str, list[float]] = {name: [] for name in sets}
        cpu: dict[str, list[float]] = {name: [] for name in sets}
        per_policy: dict[tuple[str, str], list[float]] = {}
        rng = random.Random(args.seed)
        body = ab.pod("gpu")
        for r in range(args.rounds):
            order = list(sets)
            rng.shuffle(order)
            for name in order:
                names = {o["metadata"]["name"] for o in sets[name] if not o["kind"].endswith("Binding")}
                _apply(bench, sets[name], True)
                time.sleep(args.settle)
                before, cpu_before = policy_seconds(api), cpu_seconds(pid)
                for _ in range(args.pods):
                    assert api.dry_run(f"/api/v1/namespaces/{ab.NAMESPACE}/pods", body)[0] == 201
                cpu[name].append((cpu_seconds(pid) - cpu_before) / args.pods * 1000)
                after = policy_seconds(api)
                each = {n: (after[n][0] - before.get(n, (0.0, 0.0))[0]) / args.pods * 1000
                        for n in (*names, *PLUGIN_KEYS) if n in after}
                for n, ms in each.items():
                    per_policy.setdefault((name, n), []).append(ms)
                per_pod[name].append(sum(ms for n, ms in each.items() if n in names))
                _apply(bench, sets[name], False)
                ab.log(f"round {r + 1}: {name} {per_pod[name][-1]:.3f} ms per GPU Pod in policies")
        if args.profile:
            for name, objs in sets.items():
                _profile(bench, objs, args.profile / f"{name}.pb.gz", args.profile_seconds, args.profile_connections)
        print("| set-up | objects | in-server policy time per GPU Pod, ms (median of rounds) | rounds "
              "| kube-apiserver CPU per GPU Pod, ms | CPU added over none, ms (median of rounds) |")
        print("|---|---:|---:|---|---:|---:|")
        for name, values in per_pod.items():
            added = [c - n for c, n in zip(cpu[name], cpu["none"], strict=True)]
            print(f"| {name} | {len(sets[name])} | {statistics.median(values):.3f} | "
                  f"{', '.join(f'{v:.3f}' for v in values)} | {statistics.median(cpu[name]):.3f} | "
                  f"{statistics.median(added):+.3f} |")
        print("\n| set-up | policy (or `plugin`: the admission plugin's whole time) | ms per GPU Pod (median of rounds)"
              " |\n|---|---|---:|")
        for (name, policy), values in sorted(per_policy.items()):
            if statistics.median(values) >= 0.005:
                print(f"| {name} | {policy} | {statistics.median(values):.3f} |")
        return 0
    finally:
        procs.stop_all()


if __name__ == "__main__":
    raise SystemExit(main())
