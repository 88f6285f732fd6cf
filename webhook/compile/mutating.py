"""``track-rollout`` compiled: the ``path``, ``stage``, ``cohort`` and ``policy`` annotations, as its share
(``tracking_part``) of each layout's MutatingAdmissionPolicy (``pod_mutations``, shared with steer-node-pool).

The rule (``rules/tracking.py``) in CEL, for Pods and the built-in workload kinds whose pod specs name no
ResourceClaim: which of a Pod's claims belong to the migration needs the claims' DeviceClasses (the cluster view,
``claims.scoped_usage``), so those objects are left to the webhook (``no-resource-claims``, in ``trkOn``). ``path``
is ``placement.plan`` over the names the pod spec asks for, against the policy's lists (legacy names, names a
policy resource serves, names a pool advertises) and ``spec.draSchedulers``, all known when compiling.

The object's own annotations are a ``JSONPatch`` (``_patch_own``), the template's an ``ApplyConfiguration`` merge of
the ``annotations`` map (granular: only our keys are written), with ``reinvocationPolicy: IfNeeded`` as the webhook
has it. As the rule: the object's own annotations always; the template's on CREATE, and on UPDATE only when the
template itself changed and may change (not in a controlled object, nor in a started Job).
"""

from __future__ import annotations

import datetime as dt

from webhook.compile.cel import glob_regex, lit, str_list
from webhook.compile.checks import STAGES
from webhook.compile.layouts import JOB, POD, Layout, owned, template_changed, uses_devices
from webhook.compile.shared import Part, cohort_expression, excepted
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Action
from webhook.rules.tracking import TRACK_NAMES


def mutating_stages(policy: CompiledPolicy) -> list[str]:
    """Stages where track-rollout writes (``engine``: the rule runs unless its action is Off, and it patches unless
    its own override is Audit or Off)."""
    if policy.rule_actions.get(ids.TRACK_ROLLOUT) in (Action.Off, Action.Audit):
        return []
    return [s for s in STAGES if policy.action_for(ids.TRACK_ROLLOUT, s) is not Action.Off]


def _annotations(policy: CompiledPolicy, path: str = "variables.trkPath") -> str:
    keys = {"path": path, "stage": "variables.stage", "cohort": "variables.cohort", "policy": lit(policy.identity)}
    return "{" + ", ".join(f"{lit(policy.key(k))}: {keys[k]}" for k in TRACK_NAMES) + "}"


def _apply(layout: Layout | None, annotations: str) -> str:
    """``Object{...}`` setting ``annotations`` on the object's metadata (layout None) or its template's."""
    if layout is None:
        return f"Object{{metadata: Object.metadata{{annotations: {annotations}}}}}"
    steps = [s for s in layout.template.split(".") if s] + ["metadata"]
    inner = f"annotations: {annotations}"
    for i in range(len(steps), 0, -1):
        inner = f"{steps[i - 1]}: Object.{'.'.join(steps[:i])}{{{inner}}}"
    return f"Object{{{inner}}}"


def _patch_own(guard: str, policy: CompiledPolicy, path: str = "variables.trkPath") -> str:
    """JSONPatch CEL setting the four annotations on the object itself: an ``add`` per key (the keys are known
    when compiling), or the whole map when the object has none. The same merge as an ``ApplyConfiguration`` of
    the granular annotations map, without the structured merge a ``ApplyConfiguration`` costs the API server on
    every GPU Pod (bench/results.md, issue 28 item 5). ``path``: CEL of the ``path`` value (``_own_path``)."""
    keys = {"path": path, "stage": "variables.stage", "cohort": "variables.cohort", "policy": lit(policy.identity)}
    each = ", ".join(f"JSONPatch{{op: 'add', path: {lit('/metadata/annotations/' + _escape(policy.key(k)))}, "
                     f"value: {keys[k]}}}" for k in TRACK_NAMES)
    whole = f"[JSONPatch{{op: 'add', path: '/metadata/annotations', value: {_annotations(policy, path)}}}]"
    return f"!({guard}) ? [] : has(object.metadata.annotations) ? [{each}] : {whole}"


def _escape(key: str) -> str:
    """A JSON Pointer reference token (RFC 6901): ``~`` as ``~0``, ``/`` as ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


def _template_writable(layout: Layout, prefix: str) -> str:
    """CEL: the template's annotations are written (``template_writes`` and ``template_unchanged``)."""
    changed = template_changed(layout, [f"{prefix}/{k}" for k in TRACK_NAMES])
    update = f"oldObject != null && {changed}"
    if layout is JOB:  # a batch/v1 Job's template may change only while suspended and never started
        update += " && oldObject.spec.?suspend.orValue(false) && !has(oldObject.status.startTime)"
    return f"!({owned()}) && (request.operation == 'CREATE' || ({update}))"


def _keeps_old(layout: Layout, prefix: str) -> str:
    """CEL: an UPDATE that leaves the template alone but for our keys, whose template may change (``_keep_old``)."""
    changed = template_changed(layout, [f"{prefix}/{k}" for k in TRACK_NAMES])
    keep = f"request.operation == 'UPDATE' && oldObject != null && !({owned()}) && !{changed}"
    if layout is JOB:
        keep += " && oldObject.spec.?suspend.orValue(false) && !has(oldObject.status.startTime)"
    return keep


def _own_path(layout: Layout, prefix: str) -> str:
    """CEL: the ``path`` on a workload's own annotations, its template's as it will be stored (``track_rollout``:
    ``_summary`` of ``_stored_path``): the plan's where the template's annotations are written, else the one the
    template keeps (the old template's, put back by ``_keep_old``; an unwritable template's own), the plan's where
    it keeps none."""
    key = lit(f"{prefix}/path")
    kept = (f"({_keeps_old(layout, prefix)}) ? oldObject{layout.template}.?metadata.?annotations[?{key}] : "
            f"object{layout.template}.?metadata.?annotations[?{key}]")
    return f"({_template_writable(layout, prefix)}) ? variables.trkPath : ({kept}).orValue(variables.trkPath)"


def _keep_old(layout: Layout, prefix: str, guard: str) -> str:
    """JSONPatch CEL: on an UPDATE that leaves the template alone but for our keys, put back the old template's values
    of our keys (``track_rollout``: ``desired = old``), so a ``kubectl replace`` of a manifest without them does not
    change the template and roll out every Pod. A template without ``metadata`` is not patched."""
    keys = str_list(f"{prefix}/{k}" for k in TRACK_NAMES)
    keep = _keeps_old(layout, prefix)
    new, old = f"object{layout.template}", f"oldObject{layout.template}"
    na, oa = f"{new}.metadata.?annotations.orValue({{}})", f"{old}.?metadata.?annotations.orValue({{}})"
    where = lit(layout.template.replace(".", "/") + "/metadata/annotations")
    one = f"{where} + '/' + jsonpatch.escapeKey(k)"
    patch = (f"has({new}.metadata.annotations) ? "
             f"{keys}.filter(k, k in {na} && !(k in {oa})).map(k, JSONPatch{{op: 'remove', path: {one}}}) + "
             f"{keys}.filter(k, k in {oa} && (!(k in {na}) || {na}[k] != {oa}[k]))"
             f".map(k, JSONPatch{{op: 'add', path: {one}, value: {oa}[k]}}) : "
             f"{keys}.exists(k, k in {oa}) ? [JSONPatch{{op: 'add', path: {where}, "
             f"value: {oa}.transformMap(k, v, k in {keys}, v)}}] : []")
    return f"{guard} && {keep} && has({new}.metadata) ? ({patch}) : []"


def tracking_part(layout: Layout, policy: CompiledPolicy, day: dt.date) -> Part | None:
    """track-rollout's share of the layout's MutatingAdmissionPolicy (``pod_mutations``), or None when it never
    writes. Its own matchCondition ``no-resource-claims`` (which claims are the migration's needs the cluster view)
    becomes part of ``trkOn`` unless the other rule has it too."""
    stages = mutating_stages(policy)
    if not stages:
        return None
    # the plan's path is '' exactly where the stored one is (``steering.stored_path`` differs only for a GPU spec)
    guard = f"variables.stage in {str_list(stages)} && variables.trkPlanPath != ''"
    globs = excepted(ids.TRACK_ROLLOUT, policy, day)
    if globs:
        guard += f" && !variables.ns.matches({lit(glob_regex(globs))})"
    no_claims = f"!has({layout.spec()}.resourceClaims) || size({layout.spec()}.resourceClaims) == 0"
    on = "variables.trkOn"
    return Part(
        rule=ids.TRACK_ROLLOUT, on="trkOn", guard=guard,
        conditions=[{"name": "uses-devices", "expression": uses_devices(layout)},
                    {"name": "no-resource-claims", "expression": no_claims}],
        variables=[{"name": "cohort", "expression": cohort_expression(policy)}],
        before=(_patch_own(on, policy),) if layout is POD else
        (_patch_own(on, policy, _own_path(layout, policy.prefix)), _keep_old(layout, policy.prefix, on)),
        apply=None if layout is POD else
        f"{on} && {_template_writable(layout, policy.prefix)} ? {_apply(layout, _annotations(policy))} : Object{{}}")
