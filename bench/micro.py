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

from webhook import engine, review  # noqa: E402
from webhook.app import StaticPolicy, create_app  # noqa: E402
from webhook.policy.loader import load  # noqa: E402
from webhook.view import OfflineView  # noqa: E402


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", type=Path, default=ROOT / "policies" / "default.yaml")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", nargs="*", default=list(reviews.ORDER), choices=list(reviews.ORDER))
    args = ap.parse_args()
    rows = run(args.policy, tuple(args.only))
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'review':16} {'bytes':>8} {'parse':>9} {'eval mut':>9} {'eval val':>9} {'hdl mut':>9} "
          f"{'hdl val':>9} {'floor mut':>9} {'floor val':>9}  (µs)")
    for r in rows:
        print(f"{r['review']:16} {r['bytes']:8d} {r['parse_us']:9.1f} {r['evaluate_mutate_us']:9.1f} "
              f"{r['evaluate_validate_us']:9.1f} {r['handler_mutate_us']:9.1f} {r['handler_validate_us']:9.1f} "
              f"{r['floor_mutate_us']:9.1f} {r['floor_validate_us']:9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
