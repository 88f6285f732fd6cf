"""Which CEL runtime evaluates DRA device selectors: µs per device evaluation, and what each supports.

Compares ``cel-expr-python`` (Google's C++ runtime, what webhook/devices/selectors.py uses) with
``common-expression-language`` (Rust cel-interpreter bindings, a test extra) on the selectors of
kubernetes-sigs/dra-example-driver demo/examples/cel-selector/cel-selector.yaml, each device with its own
data (as the index evaluates them). Usage: ``python bench/cel_runtimes.py [--devices N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from webhook.devices import selectors as cd  # noqa: E402

DRIVER = "gpu.dra-example-driver.sigs.k8s.io"
EXPRESSIONS = (
    f"device.attributes['{DRIVER}'].model == 'LATEST-GPU-MODEL'",
    f"device.capacity['{DRIVER}'].memory.compareTo(quantity('4Gi')) >= 0",
)
FEATURES = {
    "member function on a custom type (memory.compareTo(quantity(...)))": EXPRESSIONS[1],
    "cel.bind (ext.Bindings, in the DRA environment)": f"cel.bind(d, device.attributes['{DRIVER}'], d.index >= 0)",
    "strings extension (lowerAscii)": f"device.attributes['{DRIVER}'].model.lowerAscii() == 'latest-gpu-model'",
    "unknown function rejected at compile time": "noSuchFunction('x')",
}


def devices(n: int) -> list[dict[str, Any]]:
    sl = {"spec": {"driver": DRIVER, "nodeName": "n", "devices": [
        {"name": f"gpu-{i}", "attributes": {"model": {"string": "LATEST-GPU-MODEL"}, "index": {"int": i}},
         "capacity": {"memory": {"value": "80Gi"}}} for i in range(n)]}}
    return [dict(d.data or {}) for d in cd.slice_devices(sl)]


def _us(fn: Any, per: int) -> float:
    runs = timeit.Timer(fn).repeat(repeat=5, number=1)
    return statistics.median(runs) / per * 1e6


def google(devs: list[dict[str, Any]]) -> tuple[list[float], dict[str, str]]:
    def run(p: Any) -> None:
        for d in devs:
            p.eval(data={"device": d})
    times = [_us(lambda e=e: run(cd.compile_selector(e).program), len(devs)) for e in EXPRESSIONS]
    feats = {}
    for name, expr in FEATURES.items():
        sel = cd.compile_selector(expr)
        if "rejected" in name:
            feats[name] = "yes" if sel.error else "no"
        else:
            feats[name] = "yes" if sel.error is None and cd.evaluate(sel, cd.Device("d", DRIVER, "n", devs[0]))\
                is not None else "no"
    return times, feats


def rust(devs: list[dict[str, Any]]) -> tuple[list[float], dict[str, str]] | None:
    try:
        import cel  # common-expression-language
    except ImportError:
        return None

    def quantity(s: str) -> float:
        return float(cd.parse_quantity(s))

    def compare(a: float, b: float) -> int:
        return (a > b) - (a < b)
    plain = [{**d, "capacity": {k: {n: float(v["@quantity"]) for n, v in m.items()} for k, m in d["capacity"].items()}}
             for d in devs]

    def run(p: Any) -> None:
        for d in plain:
            ctx = cel.Context({"device": d})  # each device is its own variable set
            ctx.add_function("quantity", quantity)
            ctx.add_function("compareTo", compare)
            p.execute(ctx)
    times = [_us(lambda e=e: run(cel.compile(e)), len(devs)) for e in EXPRESSIONS]
    feats = {}
    for name, expr in FEATURES.items():
        ctx = cel.Context({"device": plain[0]})
        ctx.add_function("quantity", quantity)
        ctx.add_function("compareTo", compare)
        try:
            prog = cel.compile(expr)
            if "rejected" in name:
                feats[name] = "no (compiles; fails when run)"
                continue
            prog.execute(ctx)
            feats[name] = "yes"
        except Exception as exc:  # noqa: BLE001 - the table records what failed
            feats[name] = f"no ({type(exc).__name__})" if "rejected" not in name else "yes"
    return times, feats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=1000)
    args = ap.parse_args()
    devs = devices(args.devices)
    rows = [("cel-expr-python", *google(devs))]
    r = rust(devs)
    if r is not None:
        rows.append(("common-expression-language", *r))
    print(f"µs per device evaluation (median of 5 passes over {args.devices} devices):")
    for name, times, _ in rows:
        print(f"  {name:28} " + "  ".join(f"{us:7.2f} ({e.split('.', 1)[1][:40]}...)"
                                           for us, e in zip(times, EXPRESSIONS, strict=True)))
    for feature in FEATURES:
        print(f"{feature}: " + "; ".join(f"{name}: {feats[feature]}" for name, _, feats in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
