"""``steer-node-pool`` compiled: the node affinity as a JSONPatch in each layout's MutatingAdmissionPolicy (its share,
``steering_part``, of ``pod_mutations``, shared with track-rollout), its findings as checks.

The rule (``rules/pods.py`` ``steer_node_pool``, ``node_affinity.steer``) in CEL, for Pods and the pod templates of
the built-in kinds (``layouts``). Everything it reads is in the object or the policy: the pool is ``placement.plan``
(with the spec's claims, which move the stage's fallback pool), the pools' ``nodeSelector`` are constants, and the
webhook's earlier steering is named by the ``<prefix>/node-pool`` marker on the template. So every case is compiled.

``nodeSelectorTerms`` is an atomic list (k8s.io/api core/v1 ``NodeSelector``: ``+listType=atomic``), which an
``ApplyConfiguration`` mutation cannot change (issue #28), so the mutation is a ``JSONPatch`` that writes the
whole list. ``reinvocationPolicy: IfNeeded`` as the webhook's mutating configuration (deploy/base/webhooks.yaml); a
second run changes nothing (every pool expression is there and the marker names the pool). The rule's
matchConditions as a policy of its own (``uses-devices``, ``examined``, a Job's ``template-writable``) are kept: those
track-rollout lacks guard the patches (``stpOn``).

Its findings (a constraint that rules the pool out, a Pod bound with ``spec.nodeName``, a scheduler that does not
allocate DRA devices) are ``checks.Check``s the compiled ValidatingAdmissionPolicies carry (``steer=True``: they read
``steering_variables``). They are judged after the mutation, on an object the mutation left alone in each case
(a conflict or a bound Pod is not steered) or steered without changing what they read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from webhook.compile.cel import clip, glob_regex, lit, str_list
from webhook.compile.checks import STAGES, Check, mentions
from webhook.compile.layouts import JOB, POD, Layout, examined, uses_devices
from webhook.compile.shared import Part, excepted
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Action
from webhook.policy.placement import DEFAULT_SCHEDULER, hardware
from webhook.rules.pods import MESSAGE_MAX, NODE_POOL_ANNOTATION

POOLS = (("dra", "Dra"), ("devicePlugin", "Dp"))
EXCLUSIVE = "steer-pool"
SCHEDULER_EXCLUSIVE = "steer-scheduler"
"""``Check.exclusive`` of the conflict and bound-Pod checks (``EXCLUSIVE``: each tests one pool, ``stpPool``, and
whether ``spec.nodeName`` is set, so at most one of them fails), and of the two scheduler checks (one per pool the
Pod stays with). A scheduler check can fail beside the devicePlugin pool's conflict or bound check: two groups."""
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _selectors(policy: CompiledPolicy) -> dict[str, dict[str, str]]:
    """Configured pool -> its nodeSelector (``spec.nodePools``)."""
    pools = policy.spec.nodePools
    return {p: getattr(pools, p).nodeSelector for p, _ in POOLS if getattr(pools, p) is not None}


POOL_INPUTS = (
    ("stpGpu", "variables.trkLegacy.size() + variables.trkEr.size() > 0"),
    # _stage_pool, then plan's "never a pool that cannot serve it" for a sharing name: 'device-plugin' is the
    # stage path (not legacy, not DRA-only) only for legacy names and no claims
    ("stpStagePool", "!variables.stpGpu || variables.trkShared.size() > 0 ? '' : variables.trkDraOnly ? 'dra' : "
                     "variables.stage == 'legacy' || (!variables.stpClaims && variables.trkLegacy.size() > 0) ? "
                     "'devicePlugin' : 'dra'"),
)
"""What ``_pool`` reads besides the ``trk*`` variables of ``plan.plan_variables`` (declared once: the API server's
type check of the policies grows with the expressions' size)."""


def _pool(serves: str) -> str:
    """``placement.plan(...).pool`` in CEL ('' for None); ``serves``: CEL for ``serves_dra``."""
    return (f"variables.stpGpu && variables.trkDpOk && (!{serves} || variables.stage == 'legacy' || "
            f"!variables.trkDraOk) ? 'devicePlugin' : variables.stpGpu && {serves} && variables.trkDraOk ? 'dra' : "
            f"variables.stpStagePool == 'dra' && !{serves} ? '' : variables.stpStagePool")


def _meta(layout: Layout) -> str:
    """CEL (optional-chain root) of the template's metadata: the Pod's own for a Pod."""
    return "object.metadata" if layout is POD else f"object{layout.template}.?metadata"


def _exact(e: str, pairs: dict[str, str]) -> str:
    """CEL: the requirement ``e`` is one of the exact ``key In [value]`` of ``pairs`` (``node_affinity._is_exact``)."""
    return " || ".join(f"({e}.key == {lit(k)} && {e}.operator == 'In' && {e}.?values.orValue([]) == [{lit(v)}])"
                       for k, v in pairs.items()) or "false"


def _admits(e: str, value: str) -> str:
    """``node_affinity._admits`` in CEL for the constant label ``value`` (Gt/Lt: only an integer value, and only
    against an integer bound: API validation of NodeSelectorRequirement)."""
    vals = f"(has({e}.values) ? {e}.values : [])"
    try:
        have = int(value)
    except ValueError:
        numeric = "false"
    else:
        numeric = (f"size({vals}) > 0 && {vals}[0].matches('^[-+]?[0-9]+$') && "
                   f"({e}.operator == 'Gt' ? {have} > int({vals}[0]) : {have} < int({vals}[0]))")
    return (f"({e}.operator == 'In' ? {lit(value)} in {vals} : {e}.operator == 'NotIn' ? !({lit(value)} in {vals}) : "
            f"{e}.operator == 'Exists' ? true : {e}.operator in ['Gt', 'Lt'] ? ({numeric}) : false)")


def _describe(e: str) -> str:
    """``node_affinity._describe`` in CEL."""
    vals = f"(has({e}.values) ? {e}.values : [])"
    return f"({e}.key + ' ' + {e}.operator + (size({vals}) > 0 ? ' [' + {vals}.join(', ') + ']' : ''))"


def _conflict(short: str, selector: dict[str, str], previous: dict[str, str]) -> list[dict[str, str]]:
    """``node_affinity._conflict`` in CEL: ``stpConflict<P>``, the first constraint ruling out the pool ('' when none),
    after ``stpBad<P><i>``, per pool label the offending requirements of each term. The requirements of the webhook's
    earlier steering (``previous``, when ``stpPrev<P>``) are not counted: they are replaced."""
    prev = f"(variables.stpPrev{short} && ({_exact('e', previous)}))" if previous else "false"
    out, bad_lists = "''", []
    for i, (key, value) in reversed(list(enumerate(selector.items()))):
        bad = f"variables.stpBad{short}{i}"
        bad_lists.append({"name": f"stpBad{short}{i}", "expression": (
            f"variables.stpTerms.map(t, t.?matchExpressions.orValue([]).filter(e, !{prev} && e.key == {lit(key)} && "
            f"!{_admits('e', value)})).filter(l, size(l) > 0)")})
        ns = f"(({lit(key)} in variables.stpNodeSel) && variables.stpNodeSel[{lit(key)}] != {lit(value)})"
        out = (f"{ns} ? {lit(f'nodeSelector {key}=')} + variables.stpNodeSel[{lit(key)}] : "
               f"size({bad}) > 0 ? 'node affinity ' + {_describe(f'{bad}[0][0]')} : {out}")
    # no constraint at all, or only the steering's own term: nothing rules the pool out (most GPU Pods)
    none = (f"(!variables.spec.?nodeSelector.hasValue() && !variables.spec.?affinity.?nodeAffinity.?{REQUIRED}"
            f".hasValue()) || variables.stpOurs{short}")
    return [*reversed(bad_lists), {"name": f"stpOurs{short}", "expression": _only_ours(selector)},
            {"name": f"stpConflict{short}", "expression": f"({none}) ? '' : ({out})"}]


def pool_variables(policy: CompiledPolicy) -> list[dict[str, str]]:
    """``placement.plan``'s pool (``stpPool``; '' for None), after ``plan_variables``: what steering steers to, and
    what track-rollout's stored path compares the marker with (``stored_path``)."""
    serves = (f"(variables.spec.?schedulerName.orValue({lit(DEFAULT_SCHEDULER)}) in "
              f"{str_list(sorted(policy.dra_schedulers))} && !variables.trkSlice)")  # placement.dra_pool_allowed
    return [{"name": "stpClaims", "expression": "variables.spec.?resourceClaims.orValue([]).size() > 0"},
            *({"name": n, "expression": e} for n, e in POOL_INPUTS),
            {"name": "stpServes", "expression": serves},
            {"name": "stpPool", "expression": _pool("variables.stpServes")}]


def marker_variable(policy: CompiledPolicy, layout: Layout) -> dict[str, str]:
    """``stpMarker``: the template's ``<prefix>/node-pool`` marker as the request brings it."""
    marker = lit(policy.key(NODE_POOL_ANNOTATION))
    return {"name": "stpMarker", "expression": f"{_meta(layout)}.?annotations[?{marker}].orValue('')"}


def stored_path(written: str) -> dict[str, str]:
    """``trkPath``: ``tracking._path`` in CEL, the path the template takes as it will be stored. A template whose
    marker the steering does not write now (not steered: bound, in conflict, per-node, another scheduler's, a stage
    it does not steer in; or steered with nothing added while the marker names a pool the policy does not
    configure; ``written``: CEL, true where it writes, ``marker_written``) keeps the pool an earlier steering
    recorded: where the marker names a pool other than the plan's and that pool serves the names, the path is that
    pool's (``placement.pool_path``: ``trkDraPath``/``trkDpPath``; ``mixed`` with claims). A marker the steering
    writes is the plan's pool or gone, so the path is the plan's (``trkPlanPath``). Reads ``pool_variables`` and
    ``marker_variable``."""
    other = (f"{marker_elsewhere()} && !({written}) && "
             "(variables.stpMarker == 'dra' ? variables.trkDraOk : variables.trkDpOk)")
    gpu = "(variables.trkLegacy.size() + variables.trkEr.size() > 0)"
    there = ("(variables.stpClaims ? 'mixed' : variables.stpMarker == 'dra' ? variables.trkDraPath : "
             "variables.trkDpPath)")
    return {"name": "trkPath", "expression": f"{gpu} && {other} ? {there} : variables.trkPlanPath"}


def marker_elsewhere() -> str:
    """CEL: the marker names a pool other than the plan's (``stored_path`` then reads it; ``pod_mutations.settled``
    takes no such Pod for settled)."""
    pools = str_list(p for p, _ in POOLS)
    return f"(variables.stpMarker in {pools} && variables.stpMarker != variables.stpPool)"


def marker_written(policy: CompiledPolicy) -> str:
    """CEL: the steering writes the template's marker in this request (``_per_pool`` steers it and
    ``_marker_patch`` sets the pool, or drops a marker naming the other configured pool); otherwise the marker stays
    as it came, one naming a pool the policy no longer configures included (``node_affinity._mark``)."""
    each = " || ".join(f"(variables.stpPool == {lit(pool)} && variables.stpConflict{short} == '' && "
                       f"(variables.stpAdded{short} || variables.stpPrev{short}))"
                       for pool, short in POOLS if pool in _selectors(policy))
    return f"variables.stpOn && variables.stpNodeName == '' && ({each or 'false'})"


def steering_variables(policy: CompiledPolicy, layout: Layout) -> list[dict[str, str]]:
    """What the rule reads, after ``plan_variables``: the template's node selector, required terms and marker, the
    pool (``stpPool``, ``stpPoolDefault`` with the default scheduler), per configured pool whether the marker names
    the other pool (``stpPrev<P>``) and the conflict (``stpConflict<P>``)."""
    selectors = _selectors(policy)
    nodeaff = f"variables.spec.?affinity.?nodeAffinity.?{REQUIRED}.?nodeSelectorTerms.orValue([])"
    out = [
        {"name": "stpNodeSel", "expression": "variables.spec.?nodeSelector.orValue({})"},
        {"name": "stpTerms", "expression": nodeaff},
        marker_variable(policy, layout),
        # placement.per_node: a DaemonSet, or a Pod whose controller (the first controller reference) is one
        {"name": "stpControllers",
         "expression": "object.metadata.?ownerReferences.orValue([]).filter(r, r.?controller.orValue(false))"},
        {"name": "stpPerNode", "expression": "request.kind.kind == 'DaemonSet' || (request.kind.kind == 'Pod' && "
                                             "size(variables.stpControllers) > 0 && "
                                             "variables.stpControllers[0].kind == 'DaemonSet' && "
                                             "variables.stpControllers[0].apiVersion.startsWith('apps/'))"},
        {"name": "stpNodeName", "expression": "variables.spec.?nodeName.orValue('')"},
        *pool_variables(policy),
    ]
    if DEFAULT_SCHEDULER in policy.dra_schedulers and "dra" in selectors:  # the other-scheduler check reads it
        out.append({"name": "stpPoolDefault", "expression": _pool("!variables.trkSlice")})
    for pool, short in POOLS:
        if pool not in selectors:
            continue
        other = next(p for p, _ in POOLS if p != pool)
        previous = selectors.get(other, {})
        out.append({"name": f"stpPrev{short}",
                    "expression": f"variables.stpMarker == {lit(other)}" if previous else "false"})
        out += _conflict(short, selectors[pool], previous)
    return out


def _may_go(policy: CompiledPolicy, pool: str) -> str:
    """CEL (``... && ``, or nothing): a cheap necessary condition for ``placement.plan`` to pick ``pool``, read first
    in the pool's conflict finding, so the conflict check of a pool the Pod cannot go to computes no plan. Only the
    devicePlugin pool has one (``device_plugin_names``). It reads the stage, so it is no part of ``Check.could``."""
    if pool != "devicePlugin":
        return ""
    names = device_plugin_names(policy)
    return f"(variables.stage == 'legacy' || {mentions(names)}) && " if names else "variables.stage == 'legacy' && "


def _unconstrained(policy: CompiledPolicy, short: str) -> str:
    """CEL: no node constraint can rule the pool out (``stpConflict<P>`` is ''), read from the object alone (the
    conflict check's ``could``, negated): none at all, only this pool's own term, or only the other pool's term
    with the marker naming that pool (``_conflict`` leaves those requirements out: the steering replaces them)."""
    others = [o for p, o in POOLS if o != short and p in _selectors(policy)]
    ours = [f"variables.stpOurs{short}", *(f"(variables.stpOurs{o} && variables.stpPrev{short})" for o in others)]
    return (f"(!variables.spec.?nodeSelector.hasValue() && !variables.spec.?affinity.?nodeAffinity.?{REQUIRED}"
            f".hasValue()) || " + " || ".join(ours))


def device_plugin_names(policy: CompiledPolicy) -> list[str]:
    """``plan`` picks the devicePlugin pool in the legacy stage only, or for a Pod asking for one of these names:
    a legacy name (the stage's fallback, or the pool serving it), or a name the policy serves that the pool's nodes
    advertise (``pool_path``: every name the Pod asks for is advertised there)."""
    served = {n for n in policy.advertised["devicePlugin"] if hardware(policy, n) is not None}
    return sorted(set(policy.legacy) | served)


def steering_checks(policy: CompiledPolicy) -> list[Check]:
    """The rule's findings: per configured pool a conflict (the stage's action) and a bound Pod (advisory); a
    scheduler that does not allocate DRA devices (advisory), when the dra pool is configured."""
    checks = []
    steered = "!variables.stpPerNode"
    for pool, short in POOLS:
        selector = _selectors(policy).get(pool)
        if selector is None:
            continue
        wanted = ", ".join(f"{k}={v}" for k, v in selector.items())
        this = f"{steered} && variables.stpPool == {lit(pool)}"
        text = (f"'Pod selects ' + variables.stpConflict{short} + "
                f"{lit(f', which rules out the {pool} node pool ({wanted})')}")
        checks.append(Check(
            ids.STEER_NODE_POOL, STAGES,
            f"{_may_go(policy, pool)}{this} && variables.stpNodeName == '' && variables.stpConflict{short} != ''",
            clip(f"variables.stpConflictText{short}", MESSAGE_MAX),
            f"remove that constraint: the webhook steers GPU Pods to the {pool} pool itself",
            ((f"stpConflictText{short}", text),), plan=True, steer=True, exclusive=EXCLUSIVE,
            could=f"!({_unconstrained(policy, short)})"))
        tail = lit(f'" (spec.nodeName): not steered; it needs the {pool} pool ({wanted})')
        bound = f"'Pod is bound to node \"' + variables.stpNodeName + {tail}"
        checks.append(Check(
            ids.STEER_NODE_POOL, STAGES, f"{this} && variables.stpNodeName != ''",
            clip(f"variables.stpBoundText{short}", MESSAGE_MAX),
            f"bind it to a node of the {pool} pool, or leave spec.nodeName unset and let the webhook steer it",
            ((f"stpBoundText{short}", bound),), advisory=True, plan=True, steer=True, exclusive=EXCLUSIVE,
            could="variables.spec.?nodeName.orValue('') != ''"))
    if "dra" in _selectors(policy) and DEFAULT_SCHEDULER in policy.dra_schedulers:  # else never sent to dra
        sched = f"variables.spec.?schedulerName.orValue({lit(DEFAULT_SCHEDULER)})"
        # One check per pool it stays with ('' or devicePlugin): its words then name the pool as a constant, and
        # its messageExpression (evaluated for every validation, ``validating._message``) reads no placement plan.
        for pool, kept in (("", "not steered"), ("devicePlugin", "kept on the devicePlugin pool")):
            tail = lit('" is not known to allocate DRA devices: ' + kept + ", not sent to the dra pool")
            text = f"'schedulerName \"' + {sched} + {tail}"
            checks.append(Check(
                ids.STEER_NODE_POOL, STAGES,
                f"{steered} && variables.stpPool == {lit(pool)} && !variables.stpServes && "
                "variables.stpPoolDefault == 'dra'",
                clip(text, MESSAGE_MAX), "add the scheduler to spec.draSchedulers", advisory=True, plan=True,
                steer=True, could="!variables.stpServes", exclusive=SCHEDULER_EXCLUSIVE,
                fix_expression=f"'add \"' + {sched} + '\" to spec.draSchedulers once it allocates DRA claims'"))
    return checks


def steering_stages(policy: CompiledPolicy) -> list[str]:
    """Stages where the rule runs and its patch is kept (``engine._mutation_enabled``: not under an Audit or Off
    override of the rule itself)."""
    if not _selectors(policy) or policy.rule_actions.get(ids.STEER_NODE_POOL) in (Action.Off, Action.Audit):
        return []
    return [s for s in STAGES if policy.action_for(ids.STEER_NODE_POOL, s) is not Action.Off]


def _requirements(selector: dict[str, str]) -> str:
    """CEL list of the pool's node selector requirements (``key In [value]``), as the steering writes them. The API
    server's CEL takes only homogeneous literals (``HomogeneousAggregateLiterals``): values are dyn."""
    return "[" + ", ".join(f"{{'key': dyn({lit(k)}), 'operator': dyn('In'), 'values': dyn([{lit(v)}])}}"
                           for k, v in selector.items()) + "]"


def _only_ours(selector: dict[str, str]) -> str:
    """CEL: no nodeSelector, and the required terms are exactly the one the steering writes for this pool on a Pod
    without any (what a Pod is when the API server invokes the policy again after its own patch). Steering then
    changes nothing and no requirement of the pool's is ruled out: declared once per pool as ``stpOurs<P>``, which
    ``_terms_patch``, ``stpAdded``, ``stpConflict<P>`` and the conflict check's ``could`` read before computing the
    terms."""
    return (f"!variables.spec.?nodeSelector.hasValue() && "
            f"dyn(variables.stpTerms) == [{{'matchExpressions': {_requirements(selector)}}}]")


def _patch_variables(policy: CompiledPolicy, short: str, pool: str) -> list[dict[str, str]]:
    """``node_affinity.steer`` for ``pool`` in CEL: the terms without the earlier steering (``stpKept``), the pool's
    requirements the nodeSelector does not already hold (``stpNeed``), the new terms, whether a requirement was
    added and whether the terms changed. Terms are built as maps (``dyn``): the patch writes them whole."""
    selectors = _selectors(policy)
    other = next(p for p, _ in POOLS if p != pool)
    exprs = "t.?matchExpressions.orValue([])"
    kept = "variables.stpTerms"
    if other in selectors:
        rem = f"{exprs}.filter(e, !({_exact('e', selectors[other])}))"
        removed = f"size({rem}) != size({exprs})"
        term = (f"dyn({{?'matchFields': t.?matchFields, ?'matchExpressions': size({rem}) > 0 ? "
                f"optional.of(dyn({rem})) : optional.none()}})")
        kept = (f"variables.stpPrev{short} ? variables.stpTerms.filter(t, !({removed} && size({rem}) == 0 && "
                f"!t.?matchFields.hasValue())).map(t, {removed} ? {term} : dyn(t)) : variables.stpTerms")
    need = _requirements(selectors[pool])
    has = "e.key == n.key && e.operator == 'In' && e.?values.orValue([]) == n.values"
    k, n = f"variables.stpKept{short}", f"variables.stpNeed{short}"
    new = (f"{n}.size() == 0 ? {k} : ({k}.size() == 0 ? [dyn({{}})] : {k}).map(t, dyn({{?'matchFields': "
           f"t.?matchFields, 'matchExpressions': dyn(dyn({exprs}) + {n}.filter(n, !{exprs}.exists(e, {has})))}}))")
    added = f"{n}.size() > 0 && ({k}.size() == 0 || {k}.exists(t, {n}.exists(n, !{exprs}.exists(e, {has}))))"
    return [
        {"name": f"stpKept{short}", "expression": kept},
        {"name": f"stpNeed{short}", "expression": f"{need}.filter(n, !(n.key in variables.stpNodeSel) || "
                                                   "variables.stpNodeSel[n.key] != n.values[0])"},
        {"name": f"stpNew{short}", "expression": new},
        # no affinity: nothing kept, so a requirement is added when one is needed; only ours: nothing added
        {"name": f"stpAdded{short}", "expression": f"!variables.spec.?affinity.hasValue() ? {n}.size() > 0 : "
                                                    f"variables.stpOurs{short} ? false : ({added})"},
        {"name": f"stpChanged{short}", "expression": f"dyn(variables.stpNew{short}) != dyn(variables.stpTerms)"},
    ]


def _pointer(layout: Layout, tail: str) -> str:
    return layout.template.replace(".", "/") + tail


def _terms_patch(layout: Layout, short: str) -> str:
    """JSONPatch CEL writing ``stpNew<P>`` as the required terms (creating what is missing above them), or dropping
    the required affinity, then empty parents, when no term is left (``node_affinity._write_terms``). Read first, the
    two cases of nearly every GPU Pod, which need none of the terms computed: no affinity at all (the terms are the
    needed requirements, as the general case writes them) and only the term the steering wrote (``stpOurs<P>``: the
    policy's second invocation)."""
    s, new = _pointer(layout, "/spec/affinity"), f"variables.stpNew{short}"
    aff, na = "variables.spec.?affinity", "variables.spec.?affinity.?nodeAffinity"
    req = f"{na}.?{REQUIRED}"
    write = (f"!{aff}.hasValue() ? [JSONPatch{{op: 'add', path: {lit(s)}, value: {{'nodeAffinity': "
             f"{{{lit(REQUIRED)}: {{'nodeSelectorTerms': {new}}}}}}}}}] : "
             f"!{na}.hasValue() ? [JSONPatch{{op: 'add', path: {lit(s + '/nodeAffinity')}, value: "
             f"{{{lit(REQUIRED)}: {{'nodeSelectorTerms': {new}}}}}}}] : "
             f"!{req}.hasValue() ? [JSONPatch{{op: 'add', path: {lit(s + '/nodeAffinity/' + REQUIRED)}, value: "
             f"{{'nodeSelectorTerms': {new}}}}}] : "
             f"[JSONPatch{{op: 'add', path: {lit(s + '/nodeAffinity/' + REQUIRED + '/nodeSelectorTerms')}, "
             f"value: {new}}}]")
    drop = (f"size(dyn({aff}.orValue({{}}))) == 1 && size(dyn({na}.orValue({{}}))) == 1 ? "
            f"[JSONPatch{{op: 'remove', path: {lit(s)}}}] : size(dyn({na}.orValue({{}}))) == 1 ? "
            f"[JSONPatch{{op: 'remove', path: {lit(s + '/nodeAffinity')}}}] : "
            f"[JSONPatch{{op: 'remove', path: {lit(s + '/nodeAffinity/' + REQUIRED)}}}]")
    need = f"variables.stpNeed{short}"
    fresh = (f"({need}.size() > 0 ? [JSONPatch{{op: 'add', path: {lit(s)}, value: {{'nodeAffinity': "
             f"{{{lit(REQUIRED)}: {{'nodeSelectorTerms': [{{'matchExpressions': {need}}}]}}}}}}}}] : [])")
    general = f"(variables.stpChanged{short} ? (size({new}) > 0 ? ({write}) : ({drop})) : [])"
    return f"(!{aff}.hasValue() ? {fresh} : variables.stpOurs{short} ? [] : {general})"


def _marker_patch(layout: Layout, short: str, pool: str, key: str, tracked: str) -> str:
    """JSONPatch CEL for the marker (``node_affinity._mark``): set to the pool when a requirement was added, dropped
    when nothing of ours is left and it named the other pool. ``tracked``: CEL, true when patches applied before this
    one leave the annotations map there with other keys (track-rollout's on a Pod's own), so the marker is one key
    of it."""
    meta = _meta(layout)
    m = _pointer(layout, "/metadata")
    one = m + "/annotations/" + key.replace("~", "~0").replace("/", "~1")
    ann = f"{meta}.?annotations"
    has_meta = "true" if layout is POD else f"{meta}.hasValue()"
    put = (f"!{has_meta} ? [JSONPatch{{op: 'add', path: {lit(m)}, value: {{'annotations': "
           f"{{{lit(key)}: {lit(pool)}}}}}}}] : !{ann}.hasValue() && !{tracked} ? [JSONPatch{{op: 'add', "
           f"path: {lit(m + '/annotations')}, value: {{{lit(key)}: {lit(pool)}}}}}] : "
           f"[JSONPatch{{op: 'add', path: {lit(one)}, value: {lit(pool)}}}]")
    drop = (f"size(dyn({ann}.orValue({{}}))) == 1 && !{tracked} ? "
            f"[JSONPatch{{op: 'remove', path: {lit(m + '/annotations')}}}] : "
            f"[JSONPatch{{op: 'remove', path: {lit(one)}}}]")
    return (f"(variables.stpAdded{short} && variables.stpMarker != {lit(pool)} ? ({put}) : "
            f"!variables.stpAdded{short} && variables.stpPrev{short} ? ({drop}) : [])")


def _per_pool(policy: CompiledPolicy, patch: Callable[[str, str], str]) -> str:
    """JSONPatch CEL: ``patch(pool, short)`` for the pool the Pod goes to, when it is steered there (no conflict, no
    ``spec.nodeName``); [] otherwise. One expression for every pool: the pool is known once."""
    out = "[]"
    for pool, short in reversed(POOLS):
        if pool in _selectors(policy):
            this = f"variables.stpPool == {lit(pool)} && variables.stpConflict{short} == ''"
            out = f"{this} ? ({patch(pool, short)}) : {out}"
    return f"variables.stpOn && variables.stpNodeName == '' ? ({out}) : []"


def steering_settled(policy: CompiledPolicy) -> str:
    """CEL, true only where steering's patches are empty (``_per_pool``): the Pod is not steered, or goes to a pool
    whose requirements are its only term already (``stpOurs<P>``: nothing to write or add, so no marker either) and
    whose marker does not name the other pool (nothing to drop). A conflict also writes nothing, but is not read
    here: this is the cheap test of what a Pod is on the API server's second invocation of the policy."""
    each = [f"(variables.stpPool != {lit(pool)} || (variables.stpOurs{short} && !variables.stpPrev{short}))"
            for pool, short in POOLS if pool in _selectors(policy)]
    return f"(!(variables.stpOn && variables.stpNodeName == '') || ({' && '.join(each)}))"


def steering_part(layout: Layout, policy: CompiledPolicy, day: dt.date, tracked: str) -> Part | None:
    """steer-node-pool's share of the layout's MutatingAdmissionPolicy (``pod_mutations``), or None when it never
    steers (no pool configured, or an Audit/Off override): the affinity first, the marker after the other rules'
    patches (``tracked``: see ``_marker_patch``). Its matchConditions ``examined`` (a Pod: always) and, for a Job,
    ``template-writable`` become part of ``stpOn`` unless the other rule has them too."""
    stages = steering_stages(policy)
    if not stages:
        return None
    guard = f"variables.stage in {str_list(stages)} && !variables.stpPerNode"
    globs = excepted(ids.STEER_NODE_POOL, policy, day)
    if globs:
        guard += f" && !variables.ns.matches({lit(glob_regex(globs))})"
    key = policy.key(NODE_POOL_ANNOTATION)
    variables = steering_variables(policy, layout)
    for pool, short in POOLS:
        if pool in _selectors(policy):
            variables += _patch_variables(policy, short, pool)
    conditions = [{"name": "uses-devices", "expression": uses_devices(layout)}]
    if layout is not POD:  # a Pod is always examined
        conditions.append({"name": "examined", "expression": examined(layout, policy.prefix)})
    if layout is JOB:  # workloads.template_writes: a Job's template changes only while suspended, never started
        conditions.append({"name": "template-writable", "expression": "request.operation == 'CREATE' || "
                           "(oldObject.spec.?suspend.orValue(false) && !has(oldObject.status.startTime))"})
    return Part(rule=ids.STEER_NODE_POOL, on="stpOn", guard=guard, conditions=conditions, variables=variables,
                before=(_per_pool(policy, lambda _, short: _terms_patch(layout, short)),),
                after=(_per_pool(policy, lambda pool, short: _marker_patch(layout, short, pool, key, tracked)),))
