"""The compiled rules as CEL checks: one check per finding the webhook can report on a pod template.

A check is true when the object has the finding. ``message`` is CEL for the finding's text, the same text
the rule builds (``rules/pods.py``): the validating policies put it behind the rule id and stage exactly as
``admission.answer`` does. Variables the checks read (``variables.containers``, ``variables.init``...) are
declared by ``policies``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from webhook.compile.cel import asks_for, clip, count_of, lit, str_list
from webhook.compile.cel import names as named
from webhook.objects.pods import DEVICECLASS_PREFIX
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Resource
from webhook.policy.placement import hardware
from webhook.rules.pods import MESSAGE_MAX

STAGES = ("legacy", "pilot", "migrated")


@dataclass(frozen=True, slots=True)
class Check:
    """One finding in CEL: ``finding`` (bool), ``message`` (string) and the remediation's first line."""

    rule: str
    stages: tuple[str, ...]  # where the rule looks at all (legacy-resource-name: not in legacy)
    finding: str
    message: str
    fix: str
    variables: tuple[tuple[str, str], ...] = ()  # (name, CEL) the check's expressions read as variables.<name>
    advisory: bool = False  # ``Finding.advisory``: a warning at most, whatever the stage says
    plan: bool = False  # reads ``plan.plan_variables`` and ``plan.training_variables``
    steer: bool = False  # reads ``steering.steering_variables`` (after the plan's)
    fix_expression: str | None = None  # CEL for ``fix`` when the remediation names something of the object
    could: str | None = None
    """CEL, cheap and true whenever ``finding`` is, reading the object alone (no stage, no ``namespaceObject``): read
    first, so an object that cannot have the finding computes none of it, in the validation and again in its
    messageExpression, which the API server evaluates for every validation, passed or not (``validating._message``);
    the policy's matchCondition skips an object no check of it could fail (``validating._may_find``)."""
    exclusive: str = ""
    """Checks of one policy with the same non-empty key never fail together on one object (by construction: their
    findings test different values of one variable), so they share one validation (``validating._validations``):
    each validation the API server runs costs about 0.06 ms per request with its messageExpression, passed or not
    (bench/results.md)."""


def _who(names: str, quoted: str) -> str:
    """``rules.pods._who`` in CEL over a list of container names (``quoted``: the same names in double quotes)."""
    shown = (f"(size({quoted}) > 3 ? {quoted}.slice(0, 3).join(', ') + ' +' + string(size({quoted}) - 3) + "
             f"' more' : {quoted}.join(', '))")
    return f"(size({names}) == 1 ? 'container ' + {shown} + ' requests' : 'containers ' + {shown} + ' request')"


def mentions(names_: Sequence[str]) -> str:
    """CEL: some container names one of ``names_`` in its requests or limits (no quantity read)."""
    return "variables.containers.exists(c, " + " || ".join(named("c", n) for n in names_) + ")"


def _askers(name: str) -> str:
    """CEL list of the names of the containers (init first, as ``iter_containers``) asking for ``name``."""
    return f"variables.containers.filter(c, {asks_for('c', name)}).map(c, c.name)"


def legacy_checks(policy: CompiledPolicy) -> list[Check]:
    """``legacy-resource-name``: a legacy device-plugin name requested in a pilot or migrated cohort."""
    checks = []
    for i, (name, res) in enumerate(sorted(policy.legacy.items())):
        askers, quoted, text = f"legacy{i}", f"legacy{i}Quoted", f"legacy{i}Text"
        message = f"{_who(f'variables.{askers}', f'variables.{quoted}')} + " \
                  f"{lit(' legacy device-plugin resource ' + name)}"
        fix = (f"request {res.name} instead of {name} (same hardware, served by DeviceClass "
               f"{res.deviceClassName})")
        checks.append(Check(
            ids.LEGACY_RESOURCE_NAME, ("pilot", "migrated"), f"size(variables.{askers}) > 0",
            clip(f"variables.{text}", MESSAGE_MAX), fix,
            ((askers, _askers(name)), (quoted, f"variables.{askers}.map(n, '\"' + n + '\"')"), (text, message)),
            could=mentions([name])))
    return checks


def _group_names(policy: CompiledPolicy, res: Resource) -> list[str]:
    """Every requested name that counts as ``res`` (``placement.hardware``), sorted as the rule sorts them."""
    names = [res.name, *res.legacyNames, DEVICECLASS_PREFIX + res.deviceClassName]
    return sorted(n for n in names if hardware(policy, n) is res)


def max_per_pod_checks(policy: CompiledPolicy) -> list[Check]:
    """``max-devices-per-pod``: the scheduler's effective count of a resource above its ``maxPerPod``.

    ``objects.extended_requests`` in CEL: max(regular containers + sidecars, the peak over init containers of
    the sidecars started before one plus the one itself).
    """
    checks = []
    for i, res in enumerate(r for r in policy.spec.resources if r.maxPerPod):
        most = res.maxPerPod or 0
        names = _group_names(policy, res)
        count = count_of("c", names)
        v = {k: f"max{i}{k.capitalize()}" for k in ("side", "total", "peak", "count", "asked", "text")}
        side = f"variables.init.map(c, c.?restartPolicy.orValue('') == 'Always' ? {count} : 0)"
        total = f"([0] + variables.main.map(c, {count})).sum() + ([0] + variables.{v['side']}).sum()"
        peak = (f"([0] + variables.init.transformList(i, c, ([0] + variables.{v['side']}.slice(0, i)).sum() + "
                f"({count}))).max()")
        effective = f"variables.{v['total']} > variables.{v['peak']} ? variables.{v['total']} : variables.{v['peak']}"
        asked = f"{str_list(names)}.filter(n, variables.containers.exists(c, {asks_for('c', '', key='n')}))"
        a = f"variables.{v['asked']}"
        counted = f"(size({a}) > 1 || {a} != [{lit(res.name)}] ? ' (' + {a}.join(' + ') + ')' : '')"
        message = (f"'Pod needs ' + string(variables.{v['count']}) + ' ' + {lit(res.name)} + {counted} + "
                   f"{lit(f', above maxPerPod {res.maxPerPod}')}")
        fix = f"request at most {res.maxPerPod} {res.name} per Pod, or split the work across Pods"
        checks.append(Check(
            ids.MAX_DEVICES_PER_POD, STAGES, f"variables.{v['count']} > {res.maxPerPod}",
            clip(f"variables.{v['text']}", MESSAGE_MAX), fix,
            ((v["side"], side), (v["total"], total), (v["peak"], peak), (v["count"], effective),
             (v["asked"], asked), (v["text"], message)), could=_over(names, most)))
    return checks


SMALL_MAX = 32
"""Up to this ``maxPerPod``, ``_over`` lists the counts at or under it as literals."""


def _over(names_: Sequence[str], most: int) -> str:
    """A cheap necessary condition of a count over ``most``: not (one container, naming at most one of ``names_``,
    whose request and limit are each a plain integer literal up to ``most``). The usual GPU Pod (one container,
    ``nvidia.com/gpu: 1``) then parses no quantity for the check."""
    if most > SMALL_MAX:
        return "true"
    small, listed = str_list(str(k) for k in range(most + 1)), str_list(names_)
    fits = (f"size({listed}.filter(n, {named('c', '', key='n')})) <= 1 && {listed}.all(n, "
            f"c.?resources.?requests[?n].orValue('0') in {small} && c.?resources.?limits[?n].orValue('0') in {small})")
    return f"!(size(variables.containers) == 1 && variables.containers.all(c, {fits}))"


def training_checks(policy: CompiledPolicy) -> list[Check]:
    """``training-job-extended-resource``: a long training job whose plan puts a policy resource on DRA's
    extended-resource path (advisory). One finding per resource asked for by its own or its class's implicit name,
    as the rule groups them."""
    evicted = policy.source.spec.extendedResourceTaintEviction == "evicted"
    why = ("a NoExecute device taint evicts it at once, with no checkpoint window" if evicted else
           "no device taint moves it, it keeps running on a device under maintenance")
    checks = []
    for res in policy.spec.resources:
        names = [n for n in (res.name, DEVICECLASS_PREFIX + res.deviceClassName)
                 if n == res.name or hardware(policy, n) is res]
        asked = " || ".join(f"variables.containers.exists(c, {asks_for('c', n)})" for n in names)
        # trainJob first: a Pod that is no training job (most) never computes the plan (bench/results.md).
        # trkPlanPath is the path without the spec's claims: GPUs the device plugin serves beside a claim (an IMEX
        # channel) are not on DRA's extended-resource path (rules.pods ``_extended_on_dra``, issue 45 item 6).
        finding = (f"variables.trainJob && variables.trainPath in ['dra-extended-resource', 'mixed'] && "
                   f"variables.trkPlanPath != 'device-plugin' && ({asked})")
        text = f"training job requests {res.name} as an extended resource: {why}"
        text = text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 3] + "..."  # as rules.pods clips
        checks.append(Check(ids.TRAINING_JOB_EXTENDED_RESOURCE, STAGES, finding, lit(text),
                            "use a ResourceClaimTemplate with device tolerations instead", advisory=True, plan=True,
                            could="variables.trainJob"))
    return checks


def all_checks(policy: CompiledPolicy) -> list[Check]:
    """Every compiled check of the policy, in rule order (``ids.RULE_IDS``)."""
    return [*legacy_checks(policy), *max_per_pod_checks(policy), *training_checks(policy)]
