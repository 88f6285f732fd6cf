"""``placement.usage`` and ``placement.plan`` in CEL: the path the scheduler takes for a pod spec's devices.

Shared by ``track-rollout`` (the ``path`` annotation) and ``training-job-extended-resource`` (judged on the path,
not the stage). Everything the plan reads is in the policy (legacy names, names a resource serves, what each
pool advertises, ``spec.draSchedulers``) or in the object, so it is decided the same in the API server.
Reads ``variables.containers``, ``variables.spec`` and ``variables.stage`` (``shared``).
"""

from __future__ import annotations

from webhook.compile.cel import asks_for, glob_regex, lit, str_list
from webhook.compile.layouts import POD, Layout
from webhook.objects.pods import DEVICECLASS_PREFIX
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import SliceLabel
from webhook.policy.placement import DEFAULT_SCHEDULER, hardware


def name_lists(policy: CompiledPolicy) -> tuple[list[str], list[str], list[str]]:
    """(legacy names, names a policy resource serves, other names some pool advertises): ``placement.usage``."""
    legacy = sorted(policy.legacy)
    served = sorted({*policy.resources, *(DEVICECLASS_PREFIX + c for c in policy.by_class)})
    served = [n for n in served if hardware(policy, n) is not None and n not in policy.legacy]
    advertised = sorted({n for names in policy.advertised.values() for n in names} - {*legacy, *served})
    return legacy, served, advertised


def _means_slice(v: str, entry: SliceLabel) -> str:
    """CEL: the label value ``v`` (a string) names slice nodes (``slices.CompiledSlice.means_slice``)."""
    if entry.values:
        return f"{v}.matches({lit(glob_regex(entry.values))})"
    return f"({v}.matches('^[0-9]{{1,9}}$') && int({v}) > {entry.greaterThan})"


def slice_pin(policy: CompiledPolicy) -> str:
    """``slices.slice_pin`` in CEL (true: the spec requests an entry's name and pins its slice nodes by nodeSelector or
    a required node affinity ``In``), after ``trkLegacy``/``trkEr``; 'false' when the policy lists no entries."""
    terms = ("variables.spec.?affinity.?nodeAffinity.?requiredDuringSchedulingIgnoredDuringExecution"
             ".?nodeSelectorTerms.orValue([])")
    out = []
    for s in policy.slices:
        e = s.entry
        key = lit(e.key)
        asked = f"(variables.trkLegacy + variables.trkEr).exists(n, n in {str_list(sorted(e.resourceNames))})"
        selector = f"variables.spec.?nodeSelector[?{key}].orValue('')"
        affinity = (f"{terms}.exists(t, t.?matchExpressions.orValue([]).exists(x, x.key == {key} && "
                    f"x.operator == 'In' && x.?values.orValue([]).exists(v, {_means_slice('v', e)})))")
        out.append(f"({asked} && ({_means_slice(selector, e)} || {affinity}))")
    return " || ".join(out) or "false"


def plan_variables(policy: CompiledPolicy) -> list[dict[str, str]]:
    """``placement.usage`` and ``placement.plan`` in CEL, ending in ``trkPlanPath`` (the plan's path; '' where
    track-rollout writes nothing). What track-rollout writes is ``steering.stored_path``, which reads the marker."""
    legacy, served, shared = name_lists(policy)
    asked = f"variables.containers.exists(c, {asks_for('c', '', key='n')})"
    implicit = lit(DEVICECLASS_PREFIX)
    pool_vars = []
    for pool, short in (("devicePlugin", "Dp"), ("dra", "Dra")):
        adv = str_list(sorted(policy.advertised[pool]))
        ok = f"variables.trkShared.all(n, n in {adv}) && variables.trkLegacy.all(n, n in {adv})"
        if pool != "dra":  # a served name the pool lacks goes to DRA on the dra pool only
            ok += f" && variables.trkEr.all(n, n in {adv})"
        plugin = f"(variables.trkEr + variables.trkLegacy).exists(n, n in {adv})"
        dra = f"variables.trkEr.exists(n, !(n in {adv}))" if pool == "dra" else "false"
        path = f"{plugin} && {dra} ? 'mixed' : {plugin} ? 'device-plugin' : 'dra-extended-resource'"
        pool_vars += [{"name": f"trk{short}Ok", "expression": ok}, {"name": f"trk{short}Path", "expression": path}]
    stage_path = (
        "variables.trkLegacy.size() > 0 && variables.trkDraOnly ? 'mixed' : variables.trkLegacy.size() > 0 ? "
        "'device-plugin' : variables.trkEr.size() > 0 ? (variables.stage != 'legacy' || "
        f"variables.trkEr.all(n, n.startsWith({implicit})) ? 'dra-extended-resource' : variables.trkDraOnly ? "
        "'mixed' : 'device-plugin') : ''")
    gpu = "(variables.trkLegacy.size() + variables.trkEr.size() > 0)"
    serves = (f"(variables.spec.?schedulerName.orValue({lit(DEFAULT_SCHEDULER)}) in "
              f"{str_list(sorted(policy.dra_schedulers))} && !variables.trkSlice)")  # placement.dra_pool_allowed
    plan = (f"{gpu} && variables.trkDpOk && (!{serves} || variables.stage == 'legacy' || !variables.trkDraOk) ? "
            f"variables.trkDpPath : {gpu} && {serves} && variables.trkDraOk ? variables.trkDraPath : "
            "variables.trkStagePath")
    return [
        {"name": "trkLegacy", "expression": f"{str_list(legacy)}.filter(n, {asked})"},
        {"name": "trkEr", "expression": f"{str_list(served)}.filter(n, {asked})"},
        {"name": "trkShared", "expression": f"{str_list(shared)}.filter(n, {asked})"},
        {"name": "trkDraOnly", "expression": f"variables.trkEr.exists(n, n.startsWith({implicit}))"},
        {"name": "trkSlice", "expression": slice_pin(policy)},
        *pool_vars,
        {"name": "trkStagePath", "expression": stage_path},
        {"name": "trkPlanPath", "expression": plan},
    ]


def _label(layout: Layout, key: str) -> str:
    """CEL optional: the label ``key`` of the Pods the template makes (``objects.pod_labels``: the template's over
    the object's own). Built-in kinds imply no label of their own."""
    own = f"object.metadata.?labels[?{lit(key)}]"
    if layout is POD:
        return own
    return f"object{layout.template}.?metadata.?labels[?{lit(key)}].or({own})"


def training_variables(policy: CompiledPolicy, layout: Layout) -> list[dict[str, str]]:
    """``trainJob`` (``CompiledPolicy.is_training_job`` on the labels and the longest activeDeadlineSeconds) and
    ``trainPath`` (``plan``'s path with the spec's claims: a GPU spec with claims is ``mixed``)."""
    terms = []
    if policy.training_labels:
        terms.append(" && ".join(f"{_label(layout, k)} == optional.of({lit(v)})" for k, v in policy.training_labels))
    terms += [f"{_label(layout, k)}.hasValue()" for k in policy.training_keys]
    least = policy.spec.trainingJobs.minActiveDeadlineSeconds
    if least:
        deadlines = ["variables.spec.?activeDeadlineSeconds.orValue(0)"]
        if layout.job:
            deadlines.append(f"object{layout.job}.?activeDeadlineSeconds.orValue(0)")
        terms += [f"{d} >= {least}" for d in deadlines]
    gpu = "(variables.trkLegacy.size() + variables.trkEr.size() > 0)"
    claims = "variables.spec.?resourceClaims.orValue([]).size() > 0"
    return [{"name": "trainJob", "expression": " || ".join(f"({t})" for t in terms) or "false"},
            {"name": "trainPath", "expression": f"{gpu} && {claims} ? 'mixed' : variables.trkPlanPath"}]
