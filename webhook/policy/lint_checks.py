"""Lint warnings: a policy that loads, but does something its author probably did not mean.

Errors stop a policy from loading (``loader``); warnings never do, because each of them can be
intended for a while (an exception that runs out next week, a cohort kept for later). Every warning
points at the line to look at. The checks are deliberately conservative: a warning that is wrong
teaches people to ignore ``lint``, so a cohort is only called unreachable when that is certain.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.objects.claims import describe_toleration
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Action

Loc = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Since:
    """The policy as it was at a git ref (``lint --since REF``), and the ref's commit date when known."""

    policy: CompiledPolicy
    ref: str
    day: dt.date | None

EXPIRY_NOTICE_DAYS = 14
DENY_NOTICE_DAYS = 7
"""A schedule entry that starts a stage whose findings are denied this many days ahead (or today) is warned of."""


def warnings(
    policy: CompiledPolicy,
    file: str,
    line_of: Callable[[Loc], int],
    today: dt.date,
    device_classes: Iterable[Mapping[str, Any]] | None = None,
    cluster_gates: Mapping[str, bool] | None = None,
    namespaces: Iterable[tuple[str, Mapping[str, str]]] | None = None,
    since: Since | None = None,
) -> list[tuple[str, int, Loc, str]]:
    """Every warning as ``(file, line, key path, message)``, in file order.

    ``device_classes`` are the cluster's DeviceClass objects (raw JSON) and ``namespaces`` its Namespaces'
    (name, labels) when a cluster was reachable; ``since`` the policy as it was at a git ref. None skips the
    checks that need them.
    """
    found: list[tuple[Loc, str]] = []
    found += _exceptions(policy, today)
    found += _shadowed_cohorts(policy)
    found += _schedule_order(policy)
    found += _classes_mapped_twice(policy)
    found += _mapped_classes_outside_the_migration(policy)
    found += _broken_gate_dependencies(policy)
    found += _unbounded_injected_tolerations(policy)
    found += _unstated_plugin_names(policy)
    found += deny_soon(policy, today)
    if device_classes is not None:
        found += _cluster_classes(policy, device_classes)
    if cluster_gates is not None:
        found += _gates_against_cluster(policy, cluster_gates)
    if namespaces is not None:
        found += live_namespaces(policy, namespaces)
    if since is not None:
        found += deny_since(policy, since.policy, since.ref, since.day, today)
    out = [(file, line_of(loc), loc, message) for loc, message in found]
    out.sort(key=lambda w: w[1])
    return out


def _exceptions(policy: CompiledPolicy, today: dt.date) -> list[tuple[Loc, str]]:
    out = []
    for i, exc in enumerate(policy.spec.exceptions):
        if exc.expires is None:
            continue
        loc: Loc = ("spec", "exceptions", i, "expires")
        left = (exc.expires - today).days
        if left < 0:
            out.append((loc, f"exception {exc.reason!r} expired on {exc.expires} and no longer applies"))
        elif left <= EXPIRY_NOTICE_DAYS:
            when = "today is its last day" if left == 0 else f"{left} day{'s' if left != 1 else ''} left"
            out.append((loc, f"exception {exc.reason!r} expires on {exc.expires} ({when}); "
                             f"fix {', '.join(exc.rules)} in {', '.join(exc.namespaces)} or extend it"))
    return out


def covers(earlier: str, later: str) -> bool:
    """Whether glob ``earlier`` certainly matches every name glob ``later`` can match.

    Decided by matching ``earlier`` against the text of ``later``. That is sound when ``earlier`` has no
    wildcard but ``*`` and ``later`` no ``[...]``: each literal run of ``earlier`` (which holds no ``*`` or
    ``?``) then lies inside a literal run of ``later``, and whatever ``later``'s ``*`` and ``?`` expand to
    is absorbed by ``earlier``'s ``*``. Anything else is treated as not covered.
    """
    if "?" in earlier or "[" in earlier or "[" in later:
        return False
    return fnmatch.fnmatchcase(later, earlier)


def _shadowed_cohorts(policy: CompiledPolicy) -> list[tuple[Loc, str]]:
    out: list[tuple[Loc, str]] = []
    cohorts = policy.spec.cohorts
    for j, later in enumerate(cohorts):
        earlier = cohorts[:j]
        catch_all = next((c for c in earlier if any(set(p) == {"*"} for p in c.namespaces.names)), None)
        if catch_all is not None:
            out.append((("spec", "cohorts", j, "name"),
                        f"cohort {later.name!r} can never match: the earlier cohort {catch_all.name!r} matches "
                        "every namespace name ('*') and the first matching cohort wins"))
            continue
        names = later.namespaces.names
        if later.namespaces.selector is not None or not names:
            continue  # labels can match namespaces no glob covers
        by: list[str] = []
        for pattern in names:
            owner = next((c.name for c in earlier for p in c.namespaces.names if covers(p, pattern)), None)
            if owner is None:
                break
            by.append(owner)
        else:
            owners = ", ".join(repr(n) for n in dict.fromkeys(by))
            out.append((("spec", "cohorts", j, "namespaces", "names"),
                        f"cohort {later.name!r} can never match: every name it matches is matched first by "
                        f"the earlier cohort{'s' if len(set(by)) > 1 else ''} {owners} (first match wins); "
                        "move it up or narrow the earlier globs"))
    return out


def _schedule_order(policy: CompiledPolicy) -> list[tuple[Loc, str]]:
    out: list[tuple[Loc, str]] = []
    for i, cohort in enumerate(policy.spec.cohorts):
        for k in range(1, len(cohort.schedule)):
            prev, entry = cohort.schedule[k - 1], cohort.schedule[k]
            loc: Loc = ("spec", "cohorts", i, "schedule", k, "from")
            if entry.from_ < prev.from_:
                out.append((loc, f"schedule entry {entry.stage.value} from {entry.from_} comes after "
                                 f"{prev.stage.value} from {prev.from_} but is earlier: list entries in date "
                                 "order (they are applied by date, not by position)"))
            elif entry.from_ == prev.from_:
                out.append((loc, f"two schedule entries of cohort {cohort.name!r} start on {entry.from_} "
                                 f"({prev.stage.value}, {entry.stage.value}); only the later one ever applies"))
    return out


def _classes_mapped_twice(policy: CompiledPolicy) -> list[tuple[Loc, str]]:
    out: list[tuple[Loc, str]] = []
    first: dict[str, int] = {}
    for i, res in enumerate(policy.spec.resources):
        if res.deviceClassName in first:
            other = policy.spec.resources[first[res.deviceClassName]]
            out.append((("spec", "resources", i, "deviceClassName"),
                        f"deviceClassName {res.deviceClassName!r} is mapped twice ({other.name} and {res.name}); "
                        f"a DeviceClass has one extendedResourceName, and claims on it count as {other.name}"))
        else:
            first[res.deviceClassName] = i
    return out


def _mapped_classes_outside_the_migration(policy: CompiledPolicy) -> list[tuple[Loc, str]]:
    """A class ``resources`` maps but ``spec.migration.deviceClasses`` leaves out (and no driver list could
    bring back): its claims would be left alone like another driver's (issue #24 item 11)."""
    scope = policy.scope
    if not scope.explicit_classes or scope.explicit_drivers:
        return []
    return [(("spec", "resources", i, "deviceClassName"),
             f"DeviceClass {res.deviceClassName!r} serves {res.name} but is not in spec.migration.deviceClasses: "
             "claims on it get no claim rules or tolerations and are not counted as migrated")
            for i, res in enumerate(policy.spec.resources) if res.deviceClassName not in scope.classes]


def _broken_gate_dependencies(policy: CompiledPolicy) -> list[tuple[Loc, str]]:
    """A gate on while a gate it needs (webhook.gates.catalogue) is off: no Kubernetes component accepts that.

    Judged on the values the policy states (explicit, else the version's default); a gate left to the
    cluster (``auto``) is the cluster's business. Pointed at the explicit entry that breaks the pair: the
    dependent gate switched on, else the dependency switched off.
    """
    from webhook.gates.catalogue import DEPENDENCIES, known_in

    version = policy.spec.kubernetesVersion
    sources = policy.gate_sources
    explicit = sources.explicit

    def stated(gate: str) -> bool | None:
        if gate in sources.auto and gate not in explicit:
            return None
        return sources.fallback.get(gate, False)

    out: list[tuple[Loc, str]] = []
    for gate, deps in DEPENDENCIES.items():
        if not known_in(version, gate) or stated(gate) is not True:
            continue
        for dep in deps:
            if not known_in(version, dep) or stated(dep) is not False:
                continue
            if explicit.get(gate) is True:
                where, how = gate, f"feature gate {gate} is on but needs {dep}, which is " + (
                    "off in this policy" if dep in explicit else f"off by default in {version}")
            elif dep in explicit:
                where, how = dep, f"feature gate {dep} is off but {gate} (on by default in {version}) needs it"
            else:
                continue
            out.append((("spec", "featureGates", where),
                        f"{how}: Kubernetes enables a gate only with the gates it depends on, so no cluster runs "
                        f"this way; set {dep}: true or {gate}: false"))
    return out


def _gates_against_cluster(policy: CompiledPolicy, cluster: Mapping[str, bool]) -> list[tuple[Loc, str]]:
    """Explicit gate values the cluster contradicts: the webhook would judge fields by the wrong state."""
    from webhook.gates.cluster import contradictions

    out: list[tuple[Loc, str]] = []
    for gate, mine, theirs in contradictions(policy.gate_sources, cluster):
        effect = ("the webhook lets through fields the API server drops" if mine
                  else "the webhook reports fields the cluster accepts")
        out.append((("spec", "featureGates", gate),
                    f"feature gate {gate} is {'on' if mine else 'off'} in the policy but "
                    f"{'on' if theirs else 'off'} in the cluster: {effect}; set it to auto or fix the cluster"))
    return out


def _unbounded_injected_tolerations(policy: CompiledPolicy) -> list[tuple[Loc, str]]:
    """The tolerations ``inject-device-tolerations`` adds are exempt from ``toleration-too-broad``."""
    limit = policy.spec.claims.maxTolerationSeconds
    out = []
    for i, tol in enumerate(policy.spec.trainingJobs.deviceTolerations):
        if tol.effect not in ("", "NoExecute"):
            continue
        loc: Loc = ("spec", "trainingJobs", "deviceTolerations", i)
        described = describe_toleration(tol.model_dump())
        if tol.tolerationSeconds is None:
            out.append((loc, f"device toleration ({described}) tolerates NoExecute taints forever "
                             "(no tolerationSeconds): device maintenance could never evict training jobs"))
        elif limit is not None and tol.tolerationSeconds > limit:
            out.append((loc + ("tolerationSeconds",),
                        f"device toleration ({described}): tolerationSeconds {tol.tolerationSeconds} is above "
                        f"claims.maxTolerationSeconds {limit}, the limit users' own tolerations are held to"))
    return out


def _unstated_plugin_names(policy: CompiledPolicy) -> list[tuple[Loc, str]]:
    """A device-plugin pool that does not say what it serves: steering rests on ``CompiledPolicy.plugin_names``.

    Which pool serves a legacy-stage Pod follows from what each pool advertises (``placement.plan``); a wrong guess
    sends Pods to nodes that cannot run them, so the guess is spelt out for the author to confirm (issue 24 item 1).
    """
    pool = policy.spec.nodePools.devicePlugin
    if pool is None or pool.advertises is not None:
        return []
    names = ", ".join(sorted(policy.plugin_names)) or "nothing"
    return [(("spec", "nodePools", "devicePlugin"),
             f"nodePools.devicePlugin.advertises is unset: assuming its nodes' device plugins advertise {names} "
             "(legacyNames, and the name of each resource without legacyNames); state advertises so that "
             "legacy-stage Pods are never steered to a pool that cannot serve them")]


def _cluster_classes(policy: CompiledPolicy, device_classes: Iterable[Mapping[str, Any]]) -> list[tuple[Loc, str]]:
    classes = {
        str((c.get("metadata") or {}).get("name")): (c.get("spec") or {}) for c in device_classes
    }
    out = []
    for i, res in enumerate(policy.spec.resources):
        loc: Loc = ("spec", "resources", i, "deviceClassName")
        spec = classes.get(res.deviceClassName)
        if spec is None:
            out.append((loc, f"DeviceClass {res.deviceClassName} does not exist in the cluster: Pods requesting "
                             f"{res.name} cannot be served through DRA"))
            continue
        ern = spec.get("extendedResourceName")
        if ern != res.name:
            has = f"spec.extendedResourceName {ern}" if ern else "no spec.extendedResourceName"
            out.append((loc, f"DeviceClass {res.deviceClassName} in the cluster has {has}, but the policy maps it "
                             f"to {res.name}: set extendedResourceName: {res.name} on the class"))
    for k, name in enumerate(policy.spec.claims.allowedDeviceClasses or []):
        if name not in classes:
            out.append((("spec", "claims", "allowedDeviceClasses", k),
                        f"allowed DeviceClass {name} does not exist in the cluster"))
    return out


def _denies(policy: CompiledPolicy, stage: str) -> bool:
    """Whether findings in ``stage`` are denied (``spec.enforcement.<stage>``, before per-rule overrides)."""
    return policy.stage_actions[stage] is Action.Deny


def deny_soon(policy: CompiledPolicy, today: dt.date) -> list[tuple[Loc, str]]:
    """Schedule entries that move a cohort into a stage whose findings are denied, today or within
    ``DENY_NOTICE_DAYS``: what the webhook warns about now will be refused then."""
    default = policy.spec.defaultStage.value
    out: list[tuple[Loc, str]] = []
    for i, cohort in enumerate(policy.spec.cohorts):
        before = default
        for k, entry in sorted(enumerate(cohort.schedule), key=lambda e: e[1].from_):
            stage, days = entry.stage.value, (entry.from_ - today).days
            if stage != before and _denies(policy, stage) and 0 <= days <= DENY_NOTICE_DAYS:
                when = "today" if days == 0 else f"in {days} day{'s' if days != 1 else ''}"
                out.append((("spec", "cohorts", i, "schedule", k, "from"),
                            f"cohort {cohort.name!r} enters stage {stage} on {entry.from_} ({when}), whose findings "
                            f"are denied (enforcement.{stage}: Deny): objects only warned about in stage {before} "
                            "will be refused from then on"))
            before = stage
    return out


def deny_since(policy: CompiledPolicy, old: CompiledPolicy, ref: str, ref_day: dt.date | None,
               today: dt.date) -> list[tuple[Loc, str]]:
    """Cohorts in a stage whose findings are denied today that were not when the policy last changed (``old``, the
    policy at git ``ref``, committed on ``ref_day``): the new schedule puts them there at once, or the entry that
    did started after ``ref`` and nobody was told."""
    out: list[tuple[Loc, str]] = []
    for i, (spec, cohort) in enumerate(zip(policy.spec.cohorts, policy.cohorts, strict=True)):
        stage = cohort.stage_on(today, policy.spec.defaultStage.value)
        if not _denies(policy, stage):
            continue
        started = [(k, e) for k, e in enumerate(spec.schedule) if e.from_ <= today]
        k, entry = max(started, key=lambda e: e[1].from_) if started else (None, None)
        loc: Loc = ("spec", "cohorts", i, "schedule", k, "from") if k is not None else ("spec", "cohorts", i, "name")
        was = next((c for c in old.cohorts if c.name == cohort.name), None)
        old_stage = was.stage_on(today, old.spec.defaultStage.value) if was else old.spec.defaultStage.value
        if old_stage != stage:
            out.append((loc, f"cohort {cohort.name!r} is in stage {stage} today, whose findings are denied, but "
                             f"under the policy at {ref} it is in stage {old_stage}: this change starts denying "
                             "as soon as it is applied"))
        elif entry is not None and ref_day is not None and entry.from_ > ref_day:
            out.append((loc, f"cohort {cohort.name!r} entered stage {stage}, whose findings are denied, on "
                             f"{entry.from_}, after the policy last changed ({ref}, {ref_day})"))
    return out


def live_namespaces(policy: CompiledPolicy,
                    namespaces: Iterable[tuple[str, Mapping[str, str]]]) -> list[tuple[Loc, str]]:
    """Cohorts that match no namespace of the cluster, and name patterns that match none (a typo, a team not
    created yet). ``namespaces``: (name, labels) of every live Namespace."""
    live = list(namespaces)
    out: list[tuple[Loc, str]] = []
    for i, (spec, cohort) in enumerate(zip(policy.spec.cohorts, policy.cohorts, strict=True)):
        if not any(cohort.matches(name, labels) for name, labels in live):
            out.append((("spec", "cohorts", i, "namespaces"),
                        f"cohort {cohort.name!r} matches no namespace of the cluster ({len(live)} namespaces)"))
        for k, pattern in enumerate(spec.namespaces.names):
            if not any(fnmatch.fnmatchcase(name, pattern) for name, _ in live):
                out.append((("spec", "cohorts", i, "namespaces", "names", k),
                            f"name pattern {pattern!r} of cohort {cohort.name!r} matches no namespace of the "
                            "cluster"))
    return out


def stages_today(policy: CompiledPolicy, today: dt.date) -> list[str]:
    """Each cohort's stage on ``today`` and its next change, for ``lint``'s summary."""
    default = policy.spec.defaultStage.value
    lines = []
    for cohort in policy.cohorts:
        stage = cohort.stage_on(today, default)
        nxt = cohort.next_change(today)
        then = (f"next: {nxt.stage.value} from {nxt.from_}{' (Deny)' if _denies(policy, nxt.stage.value) else ''}"
                if nxt else "no change scheduled")
        lines.append(f"cohort {cohort.name}: {stage}{' (Deny)' if _denies(policy, stage) else ''} on {today}; "
                     f"{then}")
    lines.append(f"namespaces in no cohort: {default} (spec.defaultStage)")
    return lines
