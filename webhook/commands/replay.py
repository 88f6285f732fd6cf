"""`dra-webhook replay --policy NEW [--baseline OLD] FILE...`: what a policy change would change on real traffic.

Input is what ``serve --record FILE`` wrote: one AdmissionReview per line, for both ``/mutate`` and
``/validate``, with the answer the server sent and the identity of the policy it sent it under
(``recorded.response``, ``recorded.policy``). That answer is the baseline unless ``--baseline OLD`` names a
policy, so the report compares with what the traffic was really answered under; it says which baseline it used.
A record without an answer (written by an older ``serve``) is skipped then, with the hint to pass ``--baseline``.

Each object is judged once, as the API server would judge it: a ``/mutate`` record (the object as submitted)
goes through mutate then validate; the ``/validate`` record of the same request (same kind, namespace, name and
operation, in recording order) is then skipped (against the recorded answers: its answer joins the /mutate one),
and only a ``/validate`` record without its ``/mutate`` partner is evaluated on its own. The new policy (and a
``--baseline`` policy) sees the requests at one clock (``--at``, default now), so the report shows the change:

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
import re
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from webhook.commands import EXIT_NO, EXIT_OK, CliError, Subparsers, at_or_now, load_policy

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
        "judged once (its /mutate record through mutate + validate; the matching /validate record is skipped).\n"
        "The baseline is what the traffic was answered under: the answers recorded with each request (and the\n"
        "policy identities they name), unless --baseline names a policy; the report says which it used.",
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
                   help="compare with this policy, judging the recorded requests again (default: the answers the "
                   "server sent, kept in each record with the policy they were answered under)")
    p.add_argument("--at", default=None, metavar="DATE",
                   help="judge both policies as of this UTC date or time (default: now)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")


# -------------------------------------------------------------------------------------------- evaluate


@dataclass
class Judgement:
    """What one policy did to one object: the webhook's answers, and the patched object (identity-neutral)."""

    admitted: Admitted
    patched: dict[str, Any] | None  # None: no patch
    wire: bool = False  # warnings as sent (``limit_warnings``), to compare with recorded answers

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
        """(rule, message) -> rule, of each warning finding (``wire``: of each warning as the server sends it)."""
        if self.wire:
            from webhook.admission.review import limit_warnings

            return wire_warnings([w for a in self.answers for w in limit_warnings(a.warnings)])
        return {(v.rule, v.finding.message): v.rule for v in self.admitted.verdicts if v.action.value == "Warn"}


_WARNING = re.compile(r"(\S+) \([^)]*\): (.*)", re.S)


def wire_warnings(warnings: list[str]) -> dict[tuple[str, str], str]:
    """(rule, text) -> rule of warnings as sent (``rule (stage): message; fix: ...``): the stage label left out,
    so that a stage change alone is no new warning; a warning of no rule is ``(no rule)``."""
    out: dict[tuple[str, str], str] = {}
    for w in warnings:
        m = _WARNING.fullmatch(w)
        rule, text = (m.group(1), m.group(2)) if m else ("(no rule)", w)
        out[(rule, text)] = rule
    return out


@dataclass
class Recorded:
    """What the server answered one request (the /mutate answer, and the /validate answer of the same request
    when it was recorded), from ``recorded.response``: the baseline when ``replay`` has no ``--baseline``."""

    mutate: dict[str, Any] | None
    validate: dict[str, Any] | None
    patched: dict[str, Any] | None

    @property
    def responses(self) -> list[dict[str, Any]]:
        return [r for r in (self.mutate, self.validate) if r is not None]

    @property
    def allowed(self) -> bool:
        return all(r.get("allowed") is True for r in self.responses)

    @property
    def denied_by(self) -> dict[str, str]:
        """rule -> the message of its first denial (the causes name the rules)."""
        out: dict[str, str] = {}
        for r in self.responses:
            status = r.get("status") or {}
            for cause in (status.get("details") or {}).get("causes") or []:
                if isinstance(cause, dict) and cause.get("reason"):
                    out.setdefault(str(cause["reason"]), str(cause.get("message") or status.get("message") or ""))
        return out

    @property
    def warned(self) -> dict[tuple[str, str], str]:
        return wire_warnings([str(w) for r in self.responses for w in r.get("warnings") or []])


def recorded_patched(obj: dict[str, Any] | None, response: dict[str, Any] | None,
                     identity: str) -> dict[str, Any] | None:
    """The object after the recorded /mutate answer's patch (identity-neutral); None when it sent none (or one
    that does not apply: redacted, or not operations)."""
    import jsonpatch

    patch = (response or {}).get("patch")
    if not isinstance(patch, list) or not patch or obj is None:
        return None
    try:
        return _neutral(jsonpatch.apply_patch(obj, patch), identity)  # type: ignore[no-any-return]
    except (ValueError, TypeError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
        return None


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
    """Mutating rules whose switching off (under both policies) changes the difference; against the object as the
    recorded answer patched it (``base`` a dict, which cannot switch rules off), those whose own part of the new
    policy's patch (what switching it off there takes away) touches a differing field."""
    from webhook.rules.ruleset import standard_rules

    involved = []
    full = _neutral(judge(req, new, True, now).patched or req.object, new.identity) if isinstance(base, dict) else None
    for rule in dict.fromkeys(r.id for r in standard_rules().select(req.kind, "mutate", req.operation) if r.mutating):
        n = _neutral(judge(req, new.without_rule(rule), True, now).patched or req.object, new.identity)
        if full is not None:
            if _overlap(_diff_paths(n, full), diff):
                involved.append(rule)
            continue
        b = _neutral(judge(req, base.without_rule(rule), True, now).patched or req.object, base.identity)
        if _diff_paths(b, n) != diff:
            involved.append(rule)
    return involved or ["(unattributed)"]


def _overlap(paths: list[str], others: list[str]) -> bool:
    """Whether a JSON pointer of ``paths`` is one of ``others``, inside one, or holds one."""
    return any(p == o or o.startswith(p + "/") or p.startswith(o + "/") for p in paths for o in others)


def _diff_paths(a: Any, b: Any) -> list[str]:
    import jsonpatch

    return sorted({op["path"] for op in jsonpatch.make_patch(a, b).patch})


def compare(req: Any, subject: str, base_policy: Any, new_policy: Any, chain: bool, now: dt.datetime) -> list[Change]:
    """What the new policy changes against the baseline policy, both judging ``req`` now."""
    base = judge(req, base_policy, chain, now)
    new = judge(req, new_policy, chain, now)
    return _changes(req, subject, base, new, chain, lambda paths: _patch_rules(req, base_policy, new_policy, now,
                                                                                paths))


def compare_recorded(req: Any, subject: str, recorded: Recorded, new_policy: Any, chain: bool,
                     now: dt.datetime) -> list[Change]:
    """What the new policy changes against the answers the server sent (``recorded``)."""
    new = judge(req, new_policy, chain, now)
    new.wire = True
    before = recorded.patched if recorded.patched is not None else req.object
    return _changes(req, subject, recorded, new, chain, lambda paths: _patch_rules(req, before, new_policy, now,
                                                                                    paths))


def _changes(req: Any, subject: str, base: Judgement | Recorded, new: Judgement, chain: bool,
             attribute: Any) -> list[Change]:
    ns = req.namespace or "(cluster)"
    changes = [*_decision_changes(base, new, subject, ns), *_warning_changes(base, new, subject, ns)]
    if base.allowed and new.allowed and chain:
        before = base.patched if base.patched is not None else req.object
        after = new.patched if new.patched is not None else req.object
        if before != after:
            paths = _diff_paths(before, after)
            changes.append(Change("different patches", subject, ns, attribute(paths), [f"fields: {', '.join(paths)}"]))
    return changes


def _decision_changes(base: Judgement | Recorded, new: Judgement, subject: str, ns: str) -> list[Change]:
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


def _warning_changes(base: Judgement | Recorded, new: Judgement, subject: str, ns: str) -> list[Change]:
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
    recorded_policies: Counter[str] = field(default_factory=Counter)  # policy identity -> answers compared with

    def of(self, category: str) -> list[Change]:
        return [c for c in self.changes if c.category == category]


def _key(req: Any) -> tuple[str, ...]:
    meta = (req.object or req.old_object or {}).get("metadata") or {}
    name = req.name or meta.get("name") or meta.get("generateName") or ""
    user = str((req.user or {}).get("username") or "")
    return (req.group, req.kind, req.namespace, name, req.operation, user)


@dataclass
class _Record:
    req: Any
    subject: str
    endpoint: str
    meta: dict[str, Any]  # ``recorded``: time, endpoint, policy, response


def _records(files: list[str], out: Replay) -> Iterator[_Record]:
    """Each readable request of the recordings, in order; unreadable lines go to ``out.skipped``."""
    from webhook.admission import review
    from webhook.offline.inputs import subject_of
    from webhook.serve.recording import read_records

    for file in files:
        for line, doc, error in read_records(file):
            where = f"{file}:{line}"
            if doc is None:
                out.skipped.append(f"{where}: {error}")
                continue
            out.requests += 1
            meta = doc.pop("recorded", None) or {}
            try:
                req = review.parse(orjson.dumps(doc))
            except (review.EnvelopeError, review.RequestError) as exc:
                out.skipped.append(f"{where}: {exc.message}")
                continue
            yield _Record(req, subject_of(req), str(meta.get("endpoint") or ""), {**meta, "where": where})


def replay(files: list[str], base_policy: Any, new_policy: Any, now: dt.datetime) -> Replay:
    """Both policies on each recorded object (``base_policy``: the baseline; None: the answers recorded)."""
    if base_policy is None:
        return _replay_recorded(files, new_policy, now)
    out = Replay()
    pending: Counter[tuple[str, ...]] = Counter()
    for rec in _records(files, out):
        key = _key(rec.req)
        if rec.endpoint == "/validate" and pending[key] > 0:
            pending[key] -= 1  # the second half of a request already judged from its /mutate record
            out.paired += 1
            continue
        chain = rec.endpoint != "/validate"
        if rec.endpoint == "/mutate":
            pending[key] += 1
        out.objects += 1
        out.changes += compare(rec.req, rec.subject, base_policy, new_policy, chain, now)
    return out


def _replay_recorded(files: list[str], new_policy: Any, now: dt.datetime) -> Replay:
    """The new policy against the answers the server sent: a /mutate answer that admitted waits for the /validate
    answer of the same request (recording order); one never followed by it is compared with its /mutate answer
    alone. A record without an answer (written before ``serve --record`` kept them) is skipped."""
    out = Replay()
    waiting: dict[tuple[str, ...], list[_Record]] = {}

    def settle(m: _Record, validate: dict[str, Any] | None) -> None:
        response = m.meta["response"]
        patched = recorded_patched(m.req.object, response, str(m.meta.get("policy") or ""))
        out.changes.extend(compare_recorded(m.req, m.subject, Recorded(response, validate, patched), new_policy,
                                            True, now))

    for rec in _records(files, out):
        response = rec.meta.get("response")
        if not isinstance(response, dict):
            out.skipped.append(f"{rec.meta['where']}: no recorded answer (recorded by a serve that did not keep "
                               "answers): pass --baseline POLICY to compare with a policy")
            continue
        out.recorded_policies[str(rec.meta.get("policy") or "(unknown policy)")] += 1
        key = _key(rec.req)
        if rec.endpoint == "/validate" and waiting.get(key):
            out.paired += 1
            settle(waiting[key].pop(0), response)
            continue
        out.objects += 1
        if rec.endpoint == "/validate":
            out.changes += compare_recorded(rec.req, rec.subject, Recorded(None, response, None), new_policy,
                                            False, now)
        elif response.get("allowed") is True:
            waiting.setdefault(key, []).append(rec)
        else:
            settle(rec, None)  # denied at /mutate: the API server sends it to no validating webhook
    for left in waiting.values():
        for m in left:
            settle(m, None)
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


def _baseline(result: Replay, base: Any, base_src: str) -> str:
    """Which baseline the report compares with: the policy ``--baseline`` named, or the recorded answers."""
    if base is not None:
        return f"{base.identity} ({base_src}, --baseline)"
    policies = ", ".join(f"{p}: {n}" for p, n in sorted(result.recorded_policies.items()))
    return f"the answers recorded ({policies or 'none'})"


def _print_text(result: Replay, base: Any, new: Any, base_src: str, new_src: str, now: dt.datetime) -> None:
    print(f"baseline: {_baseline(result, base, base_src)}")
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
        "baseline": base.identity if base is not None else "recorded",
        "baselineSource": "--baseline" if base is not None else "recorded answers",
        "recordedPolicies": dict(sorted(result.recorded_policies.items())),
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
    base = load_policy(args.baseline, "baseline policy") if args.baseline else None
    new = load_policy(args.policy, "new policy")
    now = at_or_now(args.at)
    result = _replay_files(list(args.files), base, new, now)
    if base is None and not result.recorded_policies:
        raise CliError("\n".join([f"input error: no record of {', '.join(args.files)} holds the answer the server "
                                  "sent (recorded by an older serve): pass --baseline POLICY, the policy in force",
                                  *(f"  {where}" for where in result.skipped[:EXAMPLES])]))
    if args.output == "json":
        sys.stdout.write(orjson.dumps(_json(result, base, new), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print_text(result, base, new, str(args.baseline), str(args.policy), now)
    return EXIT_NO if result.of("newly denied") else EXIT_OK


def _replay_files(files: list[str], base: CompiledPolicy | None, new: CompiledPolicy, now: dt.datetime) -> Replay:
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
