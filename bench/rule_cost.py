"""Per-rule cost: µs per rule per review, in-process, for the reviews the handler-cost guard measures (issue 51).

Runs the engine's own selection and context for each review and phase (``engine._select``, ``engine._context``: a
fresh context, so a fresh ``rules.memo``, per evaluation, as a request has) and times each ``rule.fn`` in the
engine's order, chaining the mutated copies as the engine does; the rule that first asks for what the memo shares
pays for it. Also the whole ``admission.handle`` per review and phase. So the next rule's cost is visible when it is
added. The lowest of ``--batches`` batches of ``--iterations`` evaluations (on a shared machine other load only ever
adds time); ``perf_counter_ns`` around each call adds about 0.1 µs per rule. ``bench/guard.py`` prints the table;
``--root DIR`` measures another checkout's code (the "before" of a change) with this script.
Usage: ``python bench/rule_cost.py [--root DIR] [--json]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REVIEWS = ("gpu-pod", "deployment", "claim-template")
PHASES = ("mutate", "validate")


def measure(root: Path, names: tuple[str, ...] = REVIEWS, iterations: int = 300, batches: int = 5) -> dict[str, Any]:
    """{"rules": {rule: {"review/phase": µs}}, "handle": {"review/phase": µs}, "code": root} for ``root``'s code."""
    sys.path[:0] = [str(root), str(HERE)]
    import reviews

    from webhook.admission import answer, engine, review
    from webhook.policy.loader import load
    from webhook.policy.model import Action
    from webhook.rules.ruleset import standard_rules
    from webhook.rules.view import OfflineView

    policy = load(root / "policies" / "default.yaml")
    view, now, rules = OfflineView(), dt.datetime.now(dt.UTC), standard_rules()
    per_rule: dict[str, dict[str, float]] = {}
    handle: dict[str, float] = {}
    for name in names:
        req = review.parse(reviews.load(name))
        obj = req.object or {}
        namespace = req.namespace or str((obj.get("metadata") or {}).get("namespace") or "")
        for phase in PHASES:
            cell = f"{name}/{phase}"
            selected = [r for r in engine._select(req, policy, phase, rules)]
            runs: dict[str, list[float]] = {}
            for _ in range(batches):
                spent: dict[str, int] = {}
                for _ in range(iterations):
                    ctx, _ = engine._context(req, policy, view, phase, now, namespace)
                    current = obj
                    for rule in selected:
                        if policy.action_for(rule.id, ctx.stage) is Action.Off:
                            continue
                        start = time.perf_counter_ns()
                        outcome = rule.fn(current, ctx)
                        spent[rule.id] = spent.get(rule.id, 0) + time.perf_counter_ns() - start
                        if outcome.mutated is not None and rule.mutating:
                            current = outcome.mutated
                for rule_id, ns in spent.items():
                    runs.setdefault(rule_id, []).append(ns / iterations / 1000)
            for rule_id, us in runs.items():
                per_rule.setdefault(rule_id, {})[cell] = min(us)
            timings = []
            for _ in range(batches):
                start = time.perf_counter_ns()
                for _ in range(iterations):
                    answer.handle(req, phase, policy, view, now)
                timings.append((time.perf_counter_ns() - start) / iterations / 1000)
            handle[cell] = min(timings)
    return {"rules": per_rule, "handle": handle, "code": str(root)}


def table(result: dict[str, Any], names: tuple[str, ...] = REVIEWS) -> str:
    """The markdown table: one row per rule, one column per review and phase, totals last."""
    cells = [f"{n}/{p}" for n in names for p in PHASES]
    head = "| rule | " + " | ".join(c.replace("/", " ") for c in cells) + " |"
    lines = [head, "|---|" + "---:|" * len(cells)]
    rules = result["rules"]
    for rule_id in sorted(rules, key=lambda r: -sum(rules[r].values())):
        lines.append(f"| {rule_id} | " + " | ".join(_us(rules[rule_id].get(c)) for c in cells) + " |")
    lines.append("| **all rules** | " + " | ".join(
        _us(sum(v.get(c, 0.0) for v in rules.values())) for c in cells) + " |")
    lines.append("| **`admission.handle`** | " + " | ".join(_us(result["handle"].get(c)) for c in cells) + " |")
    return "\n".join(lines)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=HERE.parent, help="the checkout whose code is measured")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = measure(args.root.resolve(), iterations=args.iterations, batches=args.batches)
    print(json.dumps(result) if args.json else table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
