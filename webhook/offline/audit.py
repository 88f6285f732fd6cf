"""What ``dra-webhook audit`` decides for the objects a cluster already has: the pure half.

Each existing Pod, workload, ResourceClaim and ResourceClaimTemplate is judged as its next CREATE would be, through
the one admission path (``webhook.admission.answer.admit``: mutate, then validate the patched object), with the
cluster view the caller gives (the live one for ``audit``). The object is first made what a CREATE would send:
``status``, the server-set metadata (uid, resourceVersion, creationTimestamp, generation, managedFields) and a Pod's
``spec.nodeName`` (the scheduler's binding: a re-created Pod is scheduled again) are dropped.

Not judged, only counted:

- an object with a controller ``ownerReference`` whose kind the webhook judges itself (a Pod of a ReplicaSet, a
  ReplicaSet of a Deployment, a Job of a CronJob, a Pod of a StatefulSet or of a JobSet): its next CREATE is made
  by the controller from the owner's template, which is judged (and mutated) with the owner. A Pod owned by a
  kind the webhook does not judge is judged as a Pod;
- terminal Pods (``Succeeded``, ``Failed``): nothing re-creates them as they are;
- objects in namespaces the webhook configuration's namespaceSelector leaves out (``policy.delivery``): the API
  server never sends them.

One ``RuleResult`` per finding (``fail`` for Deny, ``warn`` for Warn and Audit, ``error`` for a rule that raised or
could not judge, ``skip`` for an exception), and per rule without a finding ``pass`` (it ran) or ``skip`` (Off in
the stage): PolicyReport's five results. Objects are streamed in and only the entries (no object) are kept.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from webhook.objects.jsonish import as_dict, metadata_annotations
from webhook.objects.pods import pod_templates
from webhook.offline.inputs import item_from
from webhook.offline.views import examined
from webhook.policy.model import Action
from webhook.rules.pods import NODE_POOL_ANNOTATION
from webhook.rules.ruleset import standard_rules

if TYPE_CHECKING:
    from webhook.admission.answer import Admitted
    from webhook.policy import delivery
    from webhook.policy.compiled import CompiledPolicy
    from webhook.rules.view import ClusterView

#: (apiVersion's group, version, kind, the objects of that kind): what the caller lists, lazily.
Listed = tuple[str, str, str, Iterable[dict[str, Any]]]

SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink",
              "deletionTimestamp", "deletionGracePeriodSeconds")
TERMINAL = ("Succeeded", "Failed")
NO_COHORT = "(no cohort)"
_RESULTS = {Action.Deny: "fail", Action.Warn: "warn", Action.Audit: "warn"}


@dataclass(frozen=True, slots=True)
class RuleResult:
    rule: str
    result: str  # pass | fail | warn | error | skip
    message: str
    fix: str = ""
    phase: str = ""
    action: str = ""
    exception: str = ""  # the policy exception that switched the finding off (result skip)

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "result": self.result, "message": self.message, "fix": self.fix,
                "phase": self.phase, "action": self.action, **({"exception": self.exception} if self.exception else {})}


@dataclass(frozen=True, slots=True)
class Entry:
    """One judged object: what its next CREATE would get (no copy of the object is kept)."""

    namespace: str
    api_version: str
    kind: str
    name: str
    cohort: str
    stage: str
    allowed: bool
    results: tuple[RuleResult, ...]
    pools: tuple[str, ...] = ()  # where steer-node-pool sends its pod templates

    @property
    def warned(self) -> bool:
        return any(r.result in ("warn", "error") for r in self.results)

    def to_json(self) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "cohort": self.cohort,
                "stage": self.stage, "refused": not self.allowed, "warned": self.warned,
                "steeredTo": list(self.pools), "results": [r.to_json() for r in self.results]}


@dataclass(slots=True)
class CohortSummary:
    name: str
    stage: str
    objects: int = 0
    refused: int = 0
    warned: int = 0
    steered: Counter[str] = field(default_factory=Counter)

    def add(self, entry: Entry) -> None:
        self.objects += 1
        self.refused += not entry.allowed
        self.warned += entry.allowed and entry.warned
        for pool in entry.pools:
            self.steered[pool] += 1

    def to_json(self) -> dict[str, Any]:
        return {"cohort": self.name, "stage": self.stage, "objects": self.objects, "refused": self.refused,
                "warned": self.warned, "steered": dict(sorted(self.steered.items()))}


@dataclass(slots=True)
class Audit:
    at: dt.datetime
    policy: str
    namespaces: dict[str, list[Entry]] = field(default_factory=dict)
    cohorts: dict[str, CohortSummary] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)  # why -> objects

    def add(self, entry: Entry) -> None:
        self.namespaces.setdefault(entry.namespace, []).append(entry)
        key = entry.cohort or NO_COHORT
        if key not in self.cohorts:
            self.cohorts[key] = CohortSummary(key, entry.stage)
        self.cohorts[key].add(entry)

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(), "policy": self.policy,
            "summary": [c.to_json() for _, c in sorted(self.cohorts.items())],
            "skipped": dict(sorted(self.skipped.items())),
            # An iterator: ``commands.write_json`` writes it object by object, never the whole document at once.
            "objects": ({"namespace": ns, **e.to_json()} for ns, entries in sorted(self.namespaces.items())
                        for e in entries),
        }


@dataclass(frozen=True, slots=True)
class Scope:
    """What the judgement needs besides the objects: the policy, the view, the date, which namespaces are sent."""

    policy: CompiledPolicy
    view: ClusterView
    now: dt.datetime
    labels: Mapping[str, Mapping[str, str]]  # namespace -> labels (the namespaceSelector and cohorts see them)
    sent: delivery.Delivery | None = None


def audit(listed: Iterable[Listed], scope: Scope) -> Audit:
    """Every listed object judged (or counted as skipped, see the module docstring), one at a time."""
    out = Audit(scope.now, scope.policy.identity)
    for group, version, kind, objects in listed:
        api_version = f"{group}/{version}" if group else version
        for obj in objects:
            why = skip_reason(obj, kind, scope)
            if why:
                out.skipped[why] += 1
            else:
                out.add(judge(obj, api_version, kind, scope))
    return out


def skip_reason(obj: Mapping[str, Any], kind: str, scope: Scope) -> str:
    """Why the webhook never judges this object's next CREATE itself ("" when it does)."""
    meta = as_dict(obj.get("metadata"))
    ns = str(meta.get("namespace") or "")
    if scope.sent is not None:
        unsent = scope.sent.why_not_sent(ns, scope.labels.get(ns))
        if unsent:
            return f"namespace {ns} not sent to the webhook"
    if kind == "Pod" and as_dict(obj.get("status")).get("phase") in TERMINAL:
        return "terminal Pod"
    owner = judged_owner(meta, scope.policy)
    return f"{kind} owned by a {owner} (judged with it)" if owner else ""


def judged_owner(meta: Mapping[str, Any], policy: CompiledPolicy) -> str:
    """The kind of the object's controller when the webhook judges that kind ("" otherwise)."""
    for ref in meta.get("ownerReferences") or ():
        if not isinstance(ref, dict) or not ref.get("controller"):
            continue
        group = str(ref.get("apiVersion") or "").rpartition("/")[0]
        kind = str(ref.get("kind") or "")
        if examined(group, kind, policy.workload_kinds):
            return kind
    return ""


def as_created(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The object as its next CREATE would send it (see the module docstring)."""
    meta = {k: v for k, v in as_dict(obj.get("metadata")).items() if k not in SERVER_SET}
    out = {k: v for k, v in obj.items() if k != "status"}
    out["metadata"] = meta
    if kind == "Pod" and isinstance(obj.get("spec"), dict):
        out["spec"] = {k: v for k, v in obj["spec"].items() if k != "nodeName"}
    return out


def judge(obj: Mapping[str, Any], api_version: str, kind: str, scope: Scope) -> Entry:
    """One object through both phases, as a CREATE; the entry keeps only names, results and the pools."""
    from webhook.admission.answer import admit

    created = as_created(obj, kind)
    meta = created["metadata"]
    ns = str(meta.get("namespace") or "")
    created.setdefault("apiVersion", api_version)
    created.setdefault("kind", kind)
    request = item_from(created, f"{kind} {ns}/{meta.get('name')}", ns or None, "CREATE").request
    admitted = admit(request, scope.policy, scope.view, scope.now)
    policy = scope.policy
    cohort = policy.cohort_for(ns, scope.labels.get(ns))
    stage = policy.stage_for(cohort, scope.now)
    # Interned: 100,000 entries share their namespace, kind and cohort strings, and most their results too.
    return Entry(sys.intern(ns), sys.intern(api_version), sys.intern(kind), str(meta.get("name") or ""),
                 sys.intern(cohort.name) if cohort else "", stage, admitted.allowed,
                 _shared(rule_results(admitted, policy, stage)),
                 steered_to(admitted, policy) if admitted.allowed else ())


_SEEN: dict[tuple[RuleResult, ...], tuple[RuleResult, ...]] = {}


def _shared(results: tuple[RuleResult, ...]) -> tuple[RuleResult, ...]:
    """One tuple for all equal results of objects without a finding (every rule passed or was Off): equal tuples
    are interchangeable, and only those few distinct ones are cached, never the tuples with a finding's message."""
    if all(r.message == "no finding" or (r.message.startswith("Off in stage") and not r.exception) for r in results):
        return _SEEN.setdefault(results, results)
    return results


def rule_results(admitted: Admitted, policy: CompiledPolicy, stage: str) -> tuple[RuleResult, ...]:
    """Each finding's result, then ``pass`` or ``skip`` for every rule that ran without one."""
    results = [_finding_result(phase, v) for phase, v in admitted.findings()]
    found = {r.rule for r in results}
    for phase, rule_id in selected_rules(admitted, policy):
        if rule_id in found:
            continue
        found.add(rule_id)
        results.append(_no_finding(rule_id, phase, policy.action_for(rule_id, stage), stage))
    if not admitted.allowed and not any(r.result == "fail" for r in results):
        # Refused with no Deny verdict: an object no rule could judge (a quantity that is none) or a failed evaluation.
        results.append(RuleResult("admission", "error", admitted.message, action=Action.Deny.value))
    return tuple(results)


_NO_FINDING: dict[tuple[str, str, Action, str], RuleResult] = {}


def _no_finding(rule_id: str, phase: str, action: Action, stage: str) -> RuleResult:
    """``pass`` (the rule ran) or ``skip`` (Off in the stage): one shared object per rule, phase, action and stage,
    so the results of 100,000 objects cost a tuple of pointers each."""
    key = (rule_id, phase, action, stage)
    found = _NO_FINDING.get(key)
    if found is None:
        result, message = ("skip", f"Off in stage {stage}") if action is Action.Off else ("pass", "no finding")
        found = _NO_FINDING[key] = RuleResult(rule_id, result, message, phase=phase, action=action.value)
    return found


def _finding_result(phase: str, v: Any) -> RuleResult:
    f = v.finding
    result = "skip" if v.excepted else "error" if v.failed else _RESULTS.get(v.action, "pass")
    return RuleResult(v.rule, result, f.message, f.remediation or "", phase, v.action.value, v.excepted)


def selected_rules(admitted: Admitted, policy: CompiledPolicy) -> list[tuple[str, str]]:
    """(phase, rule id) of the rules the engine runs for this request in the phases it got to."""
    req = admitted.request
    rules = standard_rules()
    out: list[tuple[str, str]] = []
    for phase, _ in admitted.phases:
        chosen = (rules.for_workloads(phase, req.operation) if (req.group, req.kind) in policy.workload_kinds
                  else rules.select(req.kind, phase, req.operation))
        out.extend((phase, r.id) for r in chosen)
    return out


def steered_to(admitted: Admitted, policy: CompiledPolicy) -> tuple[str, ...]:
    """The pools steer-node-pool's marker names in the object after mutation (``<prefix>/node-pool``), each once:
    where the webhook sends its Pods, whether this CREATE changed the affinity or found it already there."""
    final = admitted.final
    req = admitted.request
    marker = policy.key(NODE_POOL_ANNOTATION)
    pools = (metadata_annotations(ref.template(final) if ref.path else final).get(marker)
             for ref in pod_templates(final, req.kind, req.group, policy.template_finders))
    return tuple(dict.fromkeys(str(p) for p in pools if p))
