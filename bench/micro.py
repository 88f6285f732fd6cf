"""In-process micro-benchmark: µs per ``engine.evaluate`` for each recorded review, both phases.

Also times the whole request handler in-process (flask test client: parse, evaluate, build and dump
the response, metrics) so the HTTP/TLS share of the served latency can be told apart, and the floor's
handler (bench/floor.py: parse, answer ``allowed``) through the same test client: the difference is
the webhook's own per-request cost, with the test client's overhead (paid by both) taken out.
Prints JSON (``--json``) or a table. Usage: ``python bench/micro.py [--policy FILE] [--json]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import timeit
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import reviews  # noqa: E402
from floor import floor_app  # noqa: E402

from webhook.admission import engine, review  # noqa: E402
from webhook.offline.views import StaticView  # noqa: E402
from webhook.policy.loader import load  # noqa: E402
from webhook.rules.base import Context  # noqa: E402
from webhook.rules.satisfiable import unsatisfiable_claim  # noqa: E402
from webhook.rules.view import OfflineView  # noqa: E402
from webhook.serve.app import StaticPolicy, create_app  # noqa: E402


def _per_call_us(fn: Any, budget: float = 0.4) -> float:
    """Median of 5 repeats, each looping long enough to fill ``budget``/5 seconds."""
    timer = timeit.Timer(fn)
    one = max(min(timer.repeat(repeat=3, number=1)), 1e-9)
    number = max(1, int(budget / 5 / one))
    runs = timer.repeat(repeat=5, number=number)
    return statistics.median(runs) / number * 1e6


def run(policy_path: Path, names: tuple[str, ...] = reviews.ORDER) -> list[dict[str, Any]]:
    policy = load(policy_path)
    view = OfflineView()
    now = dt.datetime.now(dt.UTC)
    app = create_app(StaticPolicy(policy), view=view)
    client = app.test_client()
    floor = floor_app().test_client()
    out = []
    for name in names:
        body = reviews.load(name)
        req = review.parse(body)
        row: dict[str, Any] = {"review": name, "bytes": len(body)}
        for phase in ("mutate", "validate"):
            budget = 1.0 if name == "pod-1mib" else 0.4
            row[f"evaluate_{phase}_us"] = _per_call_us(
                lambda p=phase, r=req: engine.evaluate(r, policy, view, p, now), budget)

            def handler(p: str = phase, b: bytes = body) -> None:
                resp = client.post(f"/{p}", data=b, content_type="application/json")
                assert resp.status_code == 200, resp.data[:200]

            row[f"handler_{phase}_us"] = _per_call_us(handler, budget)

            def floor_handler(p: str = phase, b: bytes = body) -> None:
                resp = floor.post(f"/{p}", data=b, content_type="application/json")
                assert resp.status_code == 200, resp.data[:200]

            row[f"floor_{phase}_us"] = _per_call_us(floor_handler, budget)
        row["parse_us"] = _per_call_us(lambda b=body: review.parse(b))
        out.append(row)
    return out


SEL_DRIVER = "gpu.example.com"
SELECTORS = (  # dra-example-driver demo/examples/cel-selector/cel-selector.yaml's two, for this driver
    f"device.attributes['{SEL_DRIVER}'].model == 'LATEST-GPU-MODEL'",
    f"device.capacity['{SEL_DRIVER}'].memory.compareTo(quantity('64Gi')) >= 0",
)


def selector_cluster(nodes: int = 125, per_node: int = 8) -> StaticView:
    """1,000 devices (125 nodes x 8; odd nodes have the latest model, odd devices 80Gi) and the DeviceClass."""
    slices = [{"spec": {"driver": SEL_DRIVER, "nodeName": f"node-{n}", "pool": {"name": f"node-{n}"}, "devices": [
        {"name": f"gpu-{i}", "attributes": {"model": {"string": "LATEST-GPU-MODEL" if n % 2 else "OLD-GPU-MODEL"},
                                             "index": {"int": i}, "driverVersion": {"version": "1.0.0"}},
         "capacity": {"memory": {"value": "80Gi" if i % 2 else "40Gi"}}} for i in range(per_node)]}}
        for n in range(nodes)]
    cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": SEL_DRIVER},
           "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{SEL_DRIVER}'"}}],
                    "extendedResourceName": "example.com/gpu"}}
    return StaticView(namespaces={"ml-training": {}}, device_classes=[cls], resource_slices=slices)


def selector_claim_case(policy_path: Path) -> dict[str, Any]:
    """What unsatisfiable-claim adds to ``evaluate`` (validate) for a claim with two CEL selectors, 1,000 devices.

    ``with_devices``: the view knows the slices (index built as at watch time, class selectors precomputed; the
    request's selectors evaluated by the first request and cached, as the live view does and carries over).
    ``without_devices``: the same view without slices (the rule returns at once); their difference is what the
    rule adds (noisy on a loaded machine: ``rule_alone_us`` times the rule function by itself, the same work).
    ``first_request_ms``: the first request that brings new selectors (2 x 1,000 evaluations), paid once per
    selector text (bounded by the rule's budget; what is evaluated by then is kept for the next request).
    """
    policy = load(policy_path)
    now = dt.datetime(2027, 2, 15, tzinfo=dt.UTC)
    obj = reviews.claim_template()
    obj["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 4
    obj["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": e}} for e in SELECTORS]
    req = review.parse(json.dumps(reviews._review(obj, "bench-selectors")).encode())
    with_view = selector_cluster()
    without = StaticView(namespaces={"ml-training": {}}, device_classes=list((with_view.device_classes().value or {})
                                                                              .values()))
    t0 = timeit.default_timer()
    index = with_view.device_index().value  # built at watch time in the live view
    built_ms = (timeit.default_timer() - t0) * 1e3
    assert index is not None and index.devices == 1000
    t0 = timeit.default_timer()
    decision = engine.evaluate(req, policy, with_view, "validate", now)
    first_ms = (timeit.default_timer() - t0) * 1e3
    assert not [v for v in decision.verdicts if v.rule == "unsatisfiable-claim"], decision.verdicts
    cap = index.capacity((f"device.driver == '{SEL_DRIVER}'", *SELECTORS))
    assert cap is not None and cap.possible == 248 and cap.per_node == 4, cap
    rule_us = _per_call_us(lambda: unsatisfiable_claim(obj, _ctx(policy, with_view, now)))
    with_us = _per_call_us(lambda: engine.evaluate(req, policy, with_view, "validate", now))
    without_us = _per_call_us(lambda: engine.evaluate(req, policy, without, "validate", now))
    return {"devices": index.devices, "index_build_ms": round(built_ms, 1), "first_request_ms": round(first_ms, 1),
            "with_devices_us": round(with_us, 1), "without_devices_us": round(without_us, 1),
            "rule_alone_us": round(rule_us, 1), "rule_adds_us": round(with_us - without_us, 1)}


def nvidia_shaped_slice(node: str, gpus: int = 8) -> dict[str, Any]:
    """A ResourceSlice as NVIDIA's DRA driver publishes it (12 attributes and memory per GPU), as stored by the
    API server (managedFields, pool)."""
    attrs: dict[str, Any] = {k: {"string": v} for k, v in (
        ("type", "gpu"), ("productName", "NVIDIA H100 80GB HBM3"), ("brand", "Nvidia"), ("architecture", "Hopper"),
        ("cudaDriverVersion_s", "12.4"), ("pcieBusID", "0000:0a:00.0"), ("pcieRoot", "pci0000:00"),
        ("resourceSliceNameHint", node), ("addressingMode", "HMM"))}
    attrs |= {"driverVersion": {"version": "550.90.7"}, "cudaComputeCapability": {"version": "9.0.0"}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu", "uid": "0" * 36, "resourceVersion": "1",
                         "managedFields": [{"manager": "gpu-kubelet-plugin", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                           "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {**attrs, "index": {"int": i}, "uuid": {
                         "string": f"GPU-{node}-{i:02d}-4b1e-9f0c-6a2d2c3b"}}, "capacity": {"memory": {
                             "value": "80Gi"}}} for i in range(gpus)]}}


def device_memory(devices: int = 20_000) -> dict[str, Any]:
    """Bytes held per 1,000 devices by one cluster view (tracemalloc, after the lists are freed): the slices
    as stored before issue 29 (parsed devices) and now (projection as compact JSON), and the index over them
    with one DeviceClass selector precomputed."""
    import gc
    import tracemalloc

    from webhook.devices import selectors as cd

    slices = [nvidia_shaped_slice(f"node-{n}") for n in range(devices // 8)]
    out: dict[str, Any] = {"devices": devices}
    for name, keep in (("parsed_devices_kb", cd.slice_devices), ("projected_kb", cd.slice_cache)):
        gc.collect()
        tracemalloc.start()
        kept = [keep(s) for s in slices]
        gc.collect()
        out[name] = round(tracemalloc.get_traced_memory()[0] / devices, 1)  # bytes per device = KB per 1,000
        if name == "projected_kb":
            base = tracemalloc.get_traced_memory()[0]
            index = cd.build_index(kept, [{"spec": {"selectors": [{"cel": {
                "expression": "device.driver == 'gpu.nvidia.com'"}}]}}])
            gc.collect()
            out["index_kb"] = round((tracemalloc.get_traced_memory()[0] - base) / devices, 1)
            del index
        tracemalloc.stop()
        del kept
    return out


def _ctx(policy: Any, view: StaticView, now: dt.datetime) -> Context:
    return Context(policy=policy, kind="ResourceClaimTemplate", group="resource.k8s.io", version="v1",
                   operation="CREATE", namespace="ml-training", phase="validate", now=now, cohort=None,
                   stage="pilot", view=view)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", type=Path, default=ROOT / "policies" / "default.yaml")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--selectors", action="store_true",
                    help="only the unsatisfiable-claim case: a claim with two CEL selectors against 1,000 devices")
    ap.add_argument("--device-memory", type=int, metavar="DEVICES", default=0,
                    help="only the cluster view's memory per 1,000 devices (NVIDIA-shaped) for this many devices")
    ap.add_argument("--only", nargs="*", default=list(reviews.ORDER), choices=list(reviews.ORDER))
    args = ap.parse_args()
    if args.device_memory:
        mem = device_memory(args.device_memory)
        print(json.dumps(mem) if args.json else "cluster view, KB per 1,000 devices: "
              + ", ".join(f"{k} {v}" for k, v in mem.items()))
        return 0
    if args.selectors:
        sel = selector_claim_case(args.policy)
        print(json.dumps(sel) if args.json else "unsatisfiable-claim, claim with two CEL selectors x 1,000 devices: "
              + ", ".join(f"{k} {v}" for k, v in sel.items()))
        return 0
    rows = run(args.policy, tuple(args.only))
    if args.json:
        print(json.dumps(rows))  # bench/bench.py reads this list; --selectors --json gives the selector case
        return 0
    print(f"{'review':16} {'bytes':>8} {'parse':>9} {'eval mut':>9} {'eval val':>9} {'hdl mut':>9} "
          f"{'hdl val':>9} {'floor mut':>9} {'floor val':>9}  (µs)")
    for r in rows:
        print(f"{r['review']:16} {r['bytes']:8d} {r['parse_us']:9.1f} {r['evaluate_mutate_us']:9.1f} "
              f"{r['evaluate_validate_us']:9.1f} {r['handler_mutate_us']:9.1f} {r['handler_validate_us']:9.1f} "
              f"{r['floor_mutate_us']:9.1f} {r['floor_validate_us']:9.1f}")
    print("unsatisfiable-claim, claim with two CEL selectors x 1,000 devices: "
          + ", ".join(f"{k} {v}" for k, v in selector_claim_case(args.policy).items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
