"""`dra-webhook replay --policy NEW [--baseline OLD] FILE...`: what a policy change would change on real traffic.

Input is what ``serve --record FILE`` wrote: one AdmissionReview per line, for both ``/mutate`` and
``/validate``. Each object is judged once, as the API server would judge it: a ``/mutate`` record (the
object as submitted) goes through mutate then validate; the ``/validate`` record of the same request
(same kind, namespace, name and operation, in recording order) is then skipped, and only a ``/validate``
record without its ``/mutate`` partner is evaluated on its own. Both policies see the same requests at
the same clock (``--at``, default now), so the report shows the policy change alone:

- newly denied / newly allowed objects, by the rules that make the difference;
- new warnings on objects still admitted, by rule;
- different patches on objects admitted by both, by the mutating rules involved (found by switching
  each one off under both policies) and the fields that differ.

Each is grouped by rule and namespace with counts. Exit 1 when anything would be newly denied (a CI gate
for policy pull requests), 2 on unreadable input or a broken policy, 0 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from webhook.commands import EXIT_NO, EXIT_OK, CliError, Subparsers, at_or_now, load_policy
from webhook.policy.defaults import default_policy

if TYPE_CHECKING:
    from webhook.admission.answer import AdmissionResponse, Admitted
    from webhook.admission.review import AdmissionRequest
    from webhook.policy.compiled import CompiledPolicy

CATEGORIES = ("newly denied", "newly allowed", "new warnings", "different patches")
EXAMPLES = 5


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "replay",
        help="re-evaluate recorded traffic under a new policy and show what changes (exit 1 if newly denied)",
        description="Re-evaluate AdmissionReviews recorded by `dra-webhook serve --record FILE` under a baseline\n"
        "and a new policy, offline, and print what the change would change: newly denied, newly allowed,\n"
        "new warnings and different patches, grouped by rule and namespace with counts. Each object is\n"
        "judged once (its /mutate record through mutate + validate; the matching /validate record is skipped).",
        epilog="example:\n"
        "  dra-webhook serve --record /var/log/dra-webhook/reviews.jsonl ...\n"
        "  dra-webhook replay --policy policies/ --baseline deployed-policy/ reviews.jsonl.1 reviews.jsonl\n\n"
        "Pass a rotated file (FILE.1) before FILE to replay in recording order.\n"
        "exit status: 0 nothing newly denied, 1 something would be newly denied, 2 input or policy error",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="JSON-lines recordings (serve --record)")
    p.add_argument("--policy", type=Path, required=True, help="the new policy file or directory")
    p.add_argument("--baseline", type=Path, default=None,
                   help="the policy in force (default: the bundled policies/default.yaml)")
    p.add_argument("--at", default=None, metavar="DATE",
                   help="judge both policies as of this UTC date or time (default: now)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")


# -------------------------------------------------------------------------------------------- evaluate


@dataclass
class Judgement:
    """What one policy did to one object: the webhook's answers, and the patched object (identity-neutral)."""

    admitted: Admitted
    patched: dict[str, Any] | None  # None: no patch

    @property
    def allowed(self) -> bool:
        return self.admitted.allowed

    @property
    def answers(self) -> list[AdmissionResponse]:
        return self.admitted.answers

    @property
    def denied_by(self) -> dict[str, str]:
        """rule -> the message of its first denial."""
        out: dict[str, str] = {}
        for v in self.admitted.verdicts:
            if v.action.value == "Deny":
                out.setdefault(v.rule, v.finding.message)
        return out

    @property
    def warned(self) -> dict[tuple[str, str], str]:
        """(rule, message) -> rule, of each warning finding."""
        return {(v.rule, v.finding.message): v.rule for v in self.admitted.verdicts if v.action.value == "Warn"}


@dataclass
class Change:
    category: str
    subject: str
    namespace: str
    rules: list[str]
    details: list[str] = field(default_factory=list)


def _neutral(node: Any, identity: str) -> Any:
    """The policy's own identity (written by track-rollout) differs between any two policies: mask it."""
    if isinstance(node, dict):
        return {k: _neutral(v, identity) for k, v in node.items()}
    if isinstance(node, list):
        return [_neutral(v, identity) for v in node]
    return "<policy>" if node == identity else node


def judge(req: AdmissionRequest, policy: CompiledPolicy, chain: bool, now: dt.datetime) -> Judgement:
    """Mutate then validate (``chain``: a /mutate record), or validate alone (a lone /validate record)."""
    from webhook.admission.answer import admit, validate_only

    admitted = (admit if chain else validate_only)(req, policy, None, now)
    mutated = admitted.mutated
    return Judgement(admitted, _neutral(mutated, policy.identity) if mutated is not None else None)


def _patch_rules(req: Any, base: Any, new: Any, now: dt.datetime, diff: Any) -> list[str]:
    """Mutating rules whose switching off (under both policies) changes the difference."""
    from webhook.rules.ruleset import standard_rules

    involved = []
    for rule in dict.fromkeys(r.id for r in standard_rules().select(req.kind, "mutate", req.operation) if r.mutating):
        b = judge(req, base.without_rule(rule), True, now).patched or req.object
        n = judge(req, new.without_rule(rule), True, now).patched or req.object
        if _diff_paths(_neutral(b, base.identity), _neutral(n, new.identity)) != diff:
            involved.append(rule)
    return involved or ["(unattributed)"]


def _diff_paths(a: Any, b: Any) -> list[str]:
    import jsonpatch

    return sorted({op["path"] for op in jsonpatch.make_patch(a, b).patch})


def compare(req: Any, subject: str, base_policy: Any, new_policy: Any, chain: bool, now: dt.datetime) -> list[Change]:
    base = judge(req, base_policy, chain, now)
    new = judge(req, new_policy, chain, now)
    ns = req.namespace or "(cluster)"
    changes = [*_decision_changes(base, new, subject, ns), *_warning_changes(base, new, subject, ns)]
    if base.allowed and new.allowed and chain:
        before = base.patched if base.patched is not None else req.object
        after = new.patched if new.patched is not None else req.object
        if before != after:
            paths = _diff_paths(before, after)
            rules = _patch_rules(req, base_policy, new_policy, now, paths)
            changes.append(Change("different patches", subject, ns, rules, [f"fields: {', '.join(paths)}"]))
    return changes


def _decision_changes(base: Judgement, new: Judgement, subject: str, ns: str) -> list[Change]:
    """``newly denied`` (by the rules that deny now and did not before) or ``newly allowed``."""
    if base.allowed and not new.allowed:
        rules = [r for r in new.denied_by if r not in base.denied_by] or list(new.denied_by) or ["(no rule)"]
        return [Change("newly denied", subject, ns, rules, [f"{r}: {new.denied_by[r]}" for r in rules
                                                           if r in new.denied_by])]
    if not base.allowed and new.allowed:
        rules = list(base.denied_by) or ["(no rule)"]
        return [Change("newly allowed", subject, ns, rules, [f"{r}: was {base.denied_by[r]}" for r in rules
                                                            if r in base.denied_by])]
    return []


def _warning_changes(base: Judgement, new: Judgement, subject: str, ns: str) -> list[Change]:
    """``new warnings`` of an object the new policy admits."""
    if not new.allowed:
        return []
    fresh = {k: r for k, r in new.warned.items() if k not in base.warned}
    if not fresh:
        return []
    rules = list(dict.fromkeys(fresh.values()))
    return [Change("new warnings", subject, ns, rules, [f"{r}: {m}" for (r, m) in fresh])]


# ---------------------------------------------------------------------------------------------- replay


@dataclass
class Replay:
    requests: int = 0
    objects: int = 0
    paired: int = 0
    skipped: list[str] = field(default_factory=list)  # file:line: why
    changes: list[Change] = field(default_factory=list)

    def of(self, category: str) -> list[Change]:
        return [c for c in self.changes if c.category == category]


def _key(req: Any) -> tuple[str, ...]:
    meta = (req.object or req.old_object or {}).get("metadata") or {}
    name = req.name or meta.get("name") or meta.get("generateName") or ""
    user = str((req.user or {}).get("username") or "")
    return (req.group, req.kind, req.namespace, name, req.operation, user)


def replay(files: list[str], base_policy: Any, new_policy: Any, now: dt.datetime) -> Replay:
    from webhook.admission import review
    from webhook.offline.inputs import subject_of
    from webhook.serve.recording import read_records

    out = Replay()
    pending: Counter[tuple[str, ...]] = Counter()
    for file in files:
        for line, doc, error in read_records(file):
            where = f"{file}:{line}"
            if doc is None:
                out.skipped.append(f"{where}: {error}")
                continue
            out.requests += 1
            endpoint = str((doc.pop("recorded", None) or {}).get("endpoint") or "")
            try:
                req = review.parse(orjson.dumps(doc))
            except (review.EnvelopeError, review.RequestError) as exc:
                out.skipped.append(f"{where}: {exc.message}")
                continue
            key = _key(req)
            if endpoint == "/validate" and pending[key] > 0:
                pending[key] -= 1  # the second half of a request already judged from its /mutate record
                out.paired += 1
                continue
            chain = endpoint != "/validate"
            if endpoint == "/mutate":
                pending[key] += 1
            out.objects += 1
            out.changes += compare(req, subject_of(req), base_policy, new_policy, chain, now)
    return out


# ---------------------------------------------------------------------------------------------- output


def _groups(changes: list[Change]) -> list[tuple[str, str, int]]:
    counts: Counter[tuple[str, str]] = Counter()
    for c in changes:
        for rule in c.rules:
            counts[(rule, c.namespace)] += 1
    return sorted(((r, ns, n) for (r, ns), n in counts.items()), key=lambda g: (-g[2], g[0], g[1]))


def _objects(n: int) -> str:
    return f"{n} object{'s' if n != 1 else ''}"


def _print_text(result: Replay, base: Any, new: Any, base_src: str, new_src: str, now: dt.datetime) -> None:
    print(f"baseline: {base.identity} ({base_src})")
    print(f"new:      {new.identity} ({new_src})")
    print(f"replayed {result.requests} recorded request{'s' if result.requests != 1 else ''}: "
          f"{_objects(result.objects)} judged, {result.paired} /validate record(s) paired with their /mutate "
          f"record, {len(result.skipped)} unreadable; as of {now.date().isoformat()}")
    for where in result.skipped[:EXAMPLES]:
        print(f"  skipped {where}")
    if len(result.skipped) > EXAMPLES:
        print(f"  ... and {len(result.skipped) - EXAMPLES} more")
    for category in CATEGORIES:
        changes = result.of(category)
        print(f"\n{category}: {_objects(len(changes))}")
        if not changes:
            continue
        groups = _groups(changes)
        w_rule = max(len("RULE"), *(len(g[0]) for g in groups))
        w_ns = max(len("NAMESPACE"), *(len(g[1]) for g in groups))
        print(f"  {'RULE':<{w_rule}}  {'NAMESPACE':<{w_ns}}  COUNT")
        for rule, ns, n in groups:
            print(f"  {rule:<{w_rule}}  {ns:<{w_ns}}  {n}")
        for c in changes[:EXAMPLES]:
            print(f"  - {c.subject}")
            for d in c.details[:3]:
                print(f"      {d}")
        if len(changes) > EXAMPLES:
            print(f"  ... and {len(changes) - EXAMPLES} more")
    denied = len(result.of("newly denied"))
    print()
    print(f"{_objects(denied)} would be newly denied" if denied else "nothing would be newly denied")


def _json(result: Replay, base: Any, new: Any) -> dict[str, Any]:
    return {
        "baseline": base.identity,
        "new": new.identity,
        "requests": result.requests,
        "objects": result.objects,
        "paired": result.paired,
        "skipped": result.skipped,
        "summary": {
            category: {
                "count": len(result.of(category)),
                "groups": [{"rule": r, "namespace": ns, "count": n} for r, ns, n in _groups(result.of(category))],
            }
            for category in CATEGORIES
        },
        "changes": [
            {"category": c.category, "object": c.subject, "namespace": c.namespace, "rules": c.rules,
             "details": c.details}
            for c in result.changes
        ],
    }


def run(args: argparse.Namespace) -> int:


    base_src = args.baseline or default_policy()
    base = load_policy(base_src, "baseline policy")
    new = load_policy(args.policy, "new policy")
    now = at_or_now(args.at)
    result = _replay_files(list(args.files), base, new, now)
    if args.output == "json":
        sys.stdout.write(orjson.dumps(_json(result, base, new), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print_text(result, base, new, str(base_src), str(args.policy), now)
    return EXIT_NO if result.of("newly denied") else EXIT_OK


def _replay_files(files: list[str], base: CompiledPolicy, new: CompiledPolicy, now: dt.datetime) -> Replay:
    """``replay`` over readable recordings holding at least one record, or CliError saying which are not."""
    for f in files:
        if not Path(f).is_file():
            raise CliError(f"input error: {f}: no such file")
    try:
        result = replay(files, base, new, now)
    except OSError as exc:
        raise CliError(f"input error: {exc}") from None
    if result.requests == 0:
        raise CliError("\n".join([f"input error: no AdmissionReview records in {', '.join(files)}",
                                  *(f"  {where}" for where in result.skipped[:EXAMPLES])]))
    return result
