"""Issue #28 items 1, 3, 4: the compiled ValidatingAdmissionPolicies decide as the webhook does, on the real API server.

One control plane of its own, with NO webhook installed: ``dra-webhook compile`` output is applied as is
(server-side apply), then one table of cases (every compiled rule, every stage, a Pod and each built-in workload
kind) is sent through the API server (server-side dry-run create) and through ``dra-webhook check`` (offline,
same policy, same ``--at``). Both must allow and deny the same objects, and the API server's warnings must be
the webhook's warnings of the compiled rules, word for word. Done for two dates, so a stage change and an
expired exception are covered. A seeded random table of Pods (``random_pods``) is compared the same way, on one
date. Also: ``compile --validate`` reports the API server's type check, and a broken expression is reported.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.e2e import binaries
from tests.e2e.compiled_table import (
    CLAIM_REQUESTS,
    CLAIMS_IN,
    CONTENTS,
    DATES,
    GPU,
    MARKER,
    NAMESPACES,
    POLICY,
    POOL,
    RANDOM_SEED,
    STEERED_IN,
    STEERING,
    _c,
    _exactly,
    _expected,
    _left_to_the_webhook,
    _spec,
    _workload,
    cases,
    random_pods,
    tolerated,
)
from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import Denied, Kube
from tests.e2e.waits import eventually
from webhook.commands import load_policy
from webhook.compile import compile_admission
from webhook.compile.coverage import COMPILED
from webhook.rules.tracking import TRACK_NAMES

VAP_WARNING = re.compile(r"^Validation failed for ValidatingAdmissionPolicy '[^']+' with binding '[^']+': ")
VAP_DENIAL = re.compile(r"ValidatingAdmissionPolicy '[^']+' with binding '[^']+' denied request: ")
UPDATED_IN = ("labelled-ns", "team-a", "plain-legacy")


CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")  # track-rollout on claims stays with the webhook


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory):
    """A control plane of this module's own, with no webhook. The controller-manager runs the
    ValidatingAdmissionPolicy status controller, which type-checks the policies (``compile --validate``)."""
    found = binaries.find_or_skip()
    if not found.has_controllers:
        pytest.skip("needs kube-controller-manager (the policies' type check), which KUBEBUILDER_ASSETS lacks")
    cp = ControlPlane(found, tmp_path_factory.mktemp("compiled"))
    try:
        cp.start()
        kube = Kube(cp.api())
        for ns, labels in NAMESPACES.items():
            kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}})
            eventually(lambda ns=ns: kube.get_or_none("v1", "ServiceAccount", "default", ns), f"SA default in {ns}", 60)
        for ns in UPDATED_IN:  # before any compiled policy: admitted in an earlier stage, so to speak
            existing = _workload("Deployment", "existing", ns, CONTENTS["two-names"])
            # a path this stage's plan would not write: an UPDATE that leaves the template alone keeps it, and the
            # Deployment's own path follows its template's as stored (tracking._stored_path)
            existing["spec"]["template"]["metadata"]["annotations"] = {"dra-migration.io/path": "dra-extended-resource"}
            kube.create(existing)
        yield cp, kube
    finally:
        cp.stop()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True, text=True, timeout=300)


def _apply_compiled(cp: ControlPlane, kube: Kube, at: str) -> list[dict[str, Any]]:
    """``compile --validate`` against the plane (it prunes the previous date's objects that are no longer compiled);
    the objects applied. Objects that did not change keep their generation, so their type check is not done again:
    the tests of one date run one after the other."""
    done = _cli("compile", "--policy", str(POLICY), "--at", at, "-o", "json", "--validate",
                "--kubeconfig", str(cp.admin_kubeconfig))
    assert done.returncode == 0, done.stderr
    assert "type check passed" in done.stderr
    return json.loads(done.stdout)["items"]


def _server(kube: Kube, obj: dict[str, Any]) -> tuple[bool, list[str], str, dict[str, Any]]:
    """(allowed, the compiled policies' warnings without the API server's prefix, denial message, stored object)."""
    try:
        result = kube.create(obj, dry_run=True)
    except Denied as exc:
        return False, _ours(exc.warnings), exc.message, {}
    return True, _ours(result.warnings), "", result.obj


def _ours(warnings: list[str]) -> list[str]:
    """The compiled policies' warnings, without the API server's prefix, sorted."""
    return sorted(VAP_WARNING.sub("", w) for w in warnings if VAP_WARNING.match(w))


TEMPLATE_AT = {"Pod": (), "CronJob": ("spec", "jobTemplate", "spec", "template")}


def tracking(obj: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The track-rollout annotations on the object and on its pod template."""
    out = {}
    for where, path in (("object", ()), ("template", TEMPLATE_AT.get(obj["kind"], ("spec", "template")))):
        if where == "template" and not path:
            continue
        node: Any = obj
        for step in path:
            node = node.get(step) or {}
        ann = (node.get("metadata") or {}).get("annotations") or {}
        out[where] = {k: v for k, v in ann.items() if k.split("/")[-1] in TRACK_NAMES}
    return out


def placement(obj: dict[str, Any]) -> dict[str, Any]:
    """What steer-node-pool writes: the template's (a Pod's own) affinity and node-pool marker."""
    node: Any = obj
    for step in TEMPLATE_AT.get(obj["kind"], ("spec", "template")):
        node = node.get(step) or {}
    ann = (node.get("metadata") or {}).get("annotations") or {}
    return {"affinity": (node.get("spec") or {}).get("affinity"), "marker": ann.get(MARKER)}


def _patched(obj: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    return jsonpatch.apply_patch(obj, r["patch"]) if r["patch"] else obj


def _checked(tmp: Path, at: str, objs: list[dict[str, Any]],
             policy: Path = POLICY) -> dict[tuple[str, str], dict[str, Any]]:
    """``check -o json`` over every case (and the Namespaces, its view of namespace labels), by (kind, ns/name)."""
    namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": labels}}
                  for n, labels in NAMESPACES.items()]
    path = tmp / f"cases-{at}.yaml"
    path.write_text(yaml.safe_dump_all([*namespaces, *objs]))
    done = _cli("check", "--policy", str(policy), "--at", at, "-o", "json", str(path))
    assert done.returncode in (0, 1), done.stderr
    out = {}
    for r in json.loads(done.stdout)["results"]:
        kind, _, where = r["object"].partition(" ")
        out[(kind, where)] = r
    return out


def _wait_for_date(kube: Kube, at: str) -> None:
    """Until the API server uses this date's objects (the team-a cohort is pilot, then migrated)."""
    stage = "pilot" if at == DATES[0] else "migrated"
    legacy, fine = (_workload("Pod", "probe", "team-a", CONTENTS[c]) for c in ("legacy", "at-limit"))
    eventually(lambda: _server(kube, legacy)[0] == (stage == "pilot"), f"the {at} validating policies in use", 30)
    eventually(lambda: tracking(_server(kube, fine)[3])["object"].get("dra-migration.io/stage") == stage,
               f"the {at} mutating policies in use", 30)


def _updates(old: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """UPDATEs of a stored Deployment: only its own labels, only the webhook's template annotation, its template."""
    own = json.loads(json.dumps(old))
    own["metadata"].setdefault("labels", {})["team"] = "x"
    marker = json.loads(json.dumps(old))
    marker["spec"]["template"]["metadata"]["annotations"] = {"dra-migration.io/stage": "pilot"}
    template = json.loads(json.dumps(old))
    template["spec"]["template"]["metadata"]["labels"]["rev"] = "2"
    return {"own-labels": own, "webhook-annotation": marker, "template": template}


def _review(obj: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": f"update-{meta['namespace']}", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"}, "namespace": meta["namespace"],
        "name": meta["name"], "operation": "UPDATE", "userInfo": {"username": "e2e-admin"},
        "object": obj, "oldObject": old}}


def _enforce(cp: ControlPlane, kube: Kube, at: str) -> None:
    """The compiled objects of ``at`` applied (``_apply_compiled``) and in effect, the plane's clock past ``at``."""
    applied = _apply_compiled(cp, kube, at)
    # compile --validate read the namespaces: the teams cohort's (by name) skip the Audit (legacy) policies at their
    # bindings, and must still be judged as the webhook judges them
    assert "team-a" in {v for o in applied if o["kind"] == "ValidatingAdmissionPolicyBinding"
                        for e in o["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][1:]
                        for v in e["values"]}
    probe = _workload("Pod", "probe", "labelled-ns", CONTENTS["legacy"])
    eventually(lambda: not _server(kube, probe)[0], "the API server enforcing the compiled policies", 30)
    _wait_for_date(kube, at)


@pytest.mark.parametrize("at", DATES[:1])
def test_updates_are_judged_only_when_the_template_changes(plane, tmp_path, at):
    """``examined_templates`` on UPDATE: a change of the Deployment's own labels or of the webhook's own template
    annotation is never judged, a template change is; the API server (dry-run PUT) and ``check`` (the
    AdmissionReview with its oldObject) agree on each."""
    cp, kube = plane
    _enforce(cp, kube, at)
    namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": labels}}
                  for n, labels in NAMESPACES.items()]
    docs, sent = [], []
    for ns in UPDATED_IN:
        old = kube.get("apps/v1", "Deployment", "existing", ns)
        for what, new in _updates(old).items():
            docs.append(_review(new, old))
            sent.append((f"{ns} {what}", new))
    path = tmp_path / "updates.yaml"
    path.write_text(yaml.safe_dump_all([*namespaces, *docs]))
    done = _cli("check", "--policy", str(POLICY), "--at", at, "-o", "json", str(path))
    results = [r for r in json.loads(done.stdout)["results"] if r["object"].startswith("Deployment ")]
    assert len(results) == len(sent), done.stderr
    outcomes = {}
    for (where, new), r in zip(sent, results, strict=True):
        allowed, warnings, _ = _expected(r)
        try:
            got = kube.call("PUT", f"/apis/apps/v1/namespaces/{new['metadata']['namespace']}/deployments/existing",
                            new, [("dryRun", "All")])
            got_allowed, got_warnings = True, sorted(VAP_WARNING.sub("", w) for w in got.warnings
                                                     if VAP_WARNING.match(w))
        except Denied:
            got_allowed, got_warnings = False, []
        assert (got_allowed, got_warnings) == (allowed, warnings), where
        if got_allowed:
            assert tracking(got.obj) == tracking(_patched(new, r)), where
            assert placement(got.obj) == placement(_patched(new, r)), where
        outcomes[where] = (allowed, bool(warnings))
    assert outcomes["labelled-ns template"] == (False, False)  # migrated: denied
    assert outcomes["team-a template"] == (True, True)  # pilot: warned
    unchanged = [outcomes[f"{ns} {w}"] for ns in UPDATED_IN for w in ("own-labels", "webhook-annotation")]
    assert unchanged == [(True, False)] * len(unchanged)


SWAP = "zz-e2e-swap-to-legacy"
"""A MutatingAdmissionPolicy of someone else's (a sidecar injector, HAMi's scheduler switch...) that changes a Pod
after ours has tracked and steered it: here, its GPU becomes the legacy name."""


def _swap_objects() -> list[dict[str, Any]]:
    group = "admissionregistration.k8s.io/v1"
    ours = "object.metadata.?annotations[?'dra-migration.io/path'].hasValue()"
    mine = "object.metadata.?labels[?'e2e-swap'] == optional.of('legacy')"
    asks = "'example.com/gpu' in object.spec.containers[0].?resources.?limits.orValue({})"
    return [
        {"apiVersion": group, "kind": "MutatingAdmissionPolicy", "metadata": {"name": SWAP}, "spec": {
            "failurePolicy": "Fail", "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["pods"]}]},
            # Matched whatever the order of the two policies, so the API server counts it as invoked and invokes
            # it again after ours; it writes only once ours has (our path annotation), so ours always runs again
            # on a Pod that carries what it wrote.
            "matchConditions": [{"name": "gpu-to-swap", "expression": f"{mine} && {asks}"}],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                f"{ours} ? [JSONPatch{{op: 'replace', path: '/spec/containers/0/resources', "
                "value: {'limits': {'nvidia.com/gpu': '1'}}}] : []")}}]}},
        {"apiVersion": group, "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": SWAP},
         "spec": {"policyName": SWAP}},
    ]


@pytest.mark.parametrize("at", DATES[:1])
def test_a_later_mutation_is_tracked_and_steered_again(plane, tmp_path, at):
    """The API server invokes our Pod policy again when another mutation changes the Pod after it (kubernetes v1.36
    plugin/policy/mutating/dispatcher.go, ``reinvocationPolicy: IfNeeded``). Its ``unsettled`` matchCondition skips
    only a Pod that already carries what the policy writes, so a GPU that became the legacy name after the first
    pass is tracked and steered as ``check`` does the final Pod: path, devicePlugin pool, marker."""
    cp, kube = plane
    _apply_compiled(cp, kube, at)
    _wait_for_date(kube, at)
    swap = _swap_objects()
    for obj in swap:
        kube.create(obj)
    try:
        pod = _workload("Pod", "swapped-pod", "team-a", GPU)
        pod["metadata"]["labels"] = {"e2e-swap": "legacy"}
        final = _workload("Pod", "swapped-pod", "team-a", CONTENTS["legacy"])
        final["metadata"]["labels"] = {"e2e-swap": "legacy"}
        r = _checked(tmp_path, at, [final])[("Pod", "team-a/swapped-pod")]
        first = _checked(tmp_path, at, [pod])[("Pod", "team-a/swapped-pod")]
        assert placement(_patched(final, r)) != placement(_patched(pod, first))  # the change moves the pool

        def swapped() -> dict[str, Any]:
            allowed, _, message, got = _server(kube, pod)
            assert allowed, message
            limits = got["spec"]["containers"][0].get("resources", {}).get("limits", {})
            assert "nvidia.com/gpu" in limits, f"limits {limits}, annotations {got['metadata'].get('annotations')}"
            return got
        got = eventually(swapped, "the other mutation in use", 30)
        assert tracking(got) == tracking(_patched(final, r))
        assert placement(got) == placement(_patched(final, r))
    finally:
        for obj in reversed(swap):
            kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])


@dataclass
class Compared:
    """What ``_compare`` saw: every difference between the API server and ``check``, and counts of what happened."""

    mismatches: list[str] = field(default_factory=list)
    fired: set[tuple[str, str]] = field(default_factory=set)  # (compiled rule, action) check reported
    tracked: int = 0  # objects the API server annotated (track-rollout)
    steered: int = 0  # objects whose placement the API server changed (steer-node-pool)
    injected: int = 0  # objects whose tolerations the API server changed (inject-device-tolerations)
    found: int = 0  # objects the API server denied or warned about (a compiled policy's warning)
    findings: set[str] = field(default_factory=set)  # each compiled finding check reported, as "rule: message"


def _compare(kube: Kube, objs: list[dict[str, Any]], checked: dict[tuple[str, str], dict[str, Any]]) -> Compared:
    """Sends each object through the API server (dry-run create) and compares with ``check``'s result: allowed or
    denied, the compiled rules' warnings word for word, the denial's text, and what the mutations wrote."""
    seen = Compared()
    for obj in objs:
        meta = obj["metadata"]
        r = checked[(obj["kind"], f"{meta['namespace']}/{meta['name']}")]
        where = f"{obj['kind']} {meta['namespace']}/{meta['name']}"
        allowed, warnings, denials = _expected(r) if not _left_to_the_webhook(obj) else (True, [], [])
        if not _left_to_the_webhook(obj):
            compiled = [f for f in r["findings"] if f["rule"] in COMPILED]
            seen.fired.update((f["rule"], f["action"]) for f in compiled)
            seen.findings.update(f"{f['rule']}: {f['message']}" for f in compiled)
        elif meta["namespace"] in CLAIMS_IN and meta["name"] in CLAIM_REQUESTS:
            assert r["findings"], where  # check judges it (offline, every named class is the migration's)
        got_allowed, got_warnings, message, stored = _server(kube, obj)
        if obj["kind"].startswith("ResourceClaim"):
            pass  # track-rollout on claims stays with the webhook
        elif got_allowed and "resourceClaims" in json.dumps(obj):
            assert tracking(stored)["object"] == {}, where  # left to the webhook (matchCondition no-resource-claims)
        elif got_allowed and tracking(stored) != tracking(_patched(obj, r)):
            seen.mismatches.append(f"{where}: annotations\n  API server {tracking(stored)}\n  check      "
                                   f"{tracking(_patched(obj, r))}")
        if got_allowed and placement(stored) != placement(_patched(obj, r)):
            seen.mismatches.append(f"{where}: placement\n  API server {placement(stored)}\n  check      "
                                   f"{placement(_patched(obj, r))}")
        seen.steered += bool(stored and placement(stored) != placement(obj))
        if got_allowed and _left_to_the_webhook(obj):  # a class only the cluster view can place
            assert tolerated(stored) == tolerated(obj), where
        elif got_allowed and tolerated(stored) != tolerated(_patched(obj, r)):
            seen.mismatches.append(f"{where}: tolerations\n  API server {tolerated(stored)}\n  check      "
                                   f"{tolerated(_patched(obj, r))}")
        seen.injected += bool(stored and tolerated(stored) != tolerated(obj))
        seen.tracked += bool(stored and tracking(stored)["object"])
        if got_allowed != allowed:
            seen.mismatches.append(f"{where}: API server allowed={got_allowed} ({message}), "
                                   f"check allowed={allowed} {denials}")
        elif got_warnings != warnings:
            seen.mismatches.append(f"{where}: warnings\n  API server {got_warnings}\n  check      {warnings}")
        elif not allowed and not any(VAP_DENIAL.search(message) and message.endswith(d) for d in denials):
            seen.mismatches.append(f"{where}: denial {message!r} is none of {denials}")
        seen.found += not got_allowed or bool(got_warnings)
    return seen


RANDOM_FINDINGS = (
    "legacy-resource-name: ", "max-devices-per-pod: ", "training-job-extended-resource: ",
    "steer-node-pool: Pod selects .* rules out the dra node pool",
    "steer-node-pool: Pod selects .* rules out the devicePlugin node pool",
    "steer-node-pool: Pod is bound .* needs the dra pool",
    "steer-node-pool: Pod is bound .* needs the devicePlugin pool",
    "steer-node-pool: schedulerName .* not steered",
    "steer-node-pool: schedulerName .* kept on the devicePlugin pool",
)
"""What ``check`` must find somewhere in the random table (``rule: message`` patterns): every compiled check's
finding, a conflict and a bound Pod for each pool."""


@pytest.mark.parametrize("at", DATES[:1])  # every stage already (RANDOM_IN); the date the tests above left applied
def test_random_pods_are_decided_as_the_webhook_does(plane, tmp_path, at):
    """A seeded random table of Pods (``random_pods``) through the API server and ``check``, compared as the fixed
    table below is (``_compare``). It probes the validating policies' ``may-find`` matchCondition (each check's
    cheap necessary condition, ``Check.could``: one that is not necessary makes the API server miss a finding) and
    the steering's and tracking's conditions on combinations the fixed table does not list.
    ``DRA_E2E_RANDOM_SEED=<n>`` draws another table."""
    cp, kube = plane
    _enforce(cp, kube, at)
    objs = random_pods()
    seen = _compare(kube, objs, _checked(tmp_path, at, objs))
    assert not seen.mismatches, f"seed {RANDOM_SEED}:\n" + "\n".join(seen.mismatches)
    # not vacuous: many objects with a compiled finding, many steered, and a finding of every compiled check
    assert seen.found > len(objs) / 4, seen.found
    assert seen.steered > len(objs) / 6, seen.steered
    missed = [p for p in RANDOM_FINDINGS if not any(re.match(p, f) for f in seen.findings)]
    assert not missed, missed


@pytest.mark.parametrize("at", DATES)
def test_compiled_policies_decide_as_the_webhook(plane, tmp_path, at):
    cp, kube = plane
    _enforce(cp, kube, at)
    objs = cases()
    seen = _compare(kube, objs, _checked(tmp_path, at, objs))
    assert not seen.mismatches, "\n".join(seen.mismatches)
    pods_and_templates = len([o for o in objs if not o["kind"].startswith("ResourceClaim")])
    assert seen.tracked > pods_and_templates / 3, seen.tracked
    assert seen.steered > pods_and_templates / 3, seen.steered
    assert seen.injected == 2 * len(STEERED_IN), seen.injected  # the training template and claim, in every ns
    # The table exercises every compiled rule in every action this date gives it.
    validating = [rule for rule in COMPILED if rule not in ("track-rollout", "inject-device-tolerations")]  # mutations
    assert {(rule, a) for rule in validating for a in ("Deny", "Warn", "Audit")} <= seen.fired | {
        ("legacy-resource-name", "Audit"), ("training-job-extended-resource", "Deny")}, seen.fired


def _probe(policy: dict[str, Any]) -> list[dict[str, Any]]:
    """A copy of a compiled ValidatingAdmissionPolicy's matchConditions with one validation that always fails (Warn,
    failurePolicy Fail: an evaluation error of the conditions denies the request): it warns exactly when the
    conditions let an object through to the policy's validations."""
    name = "probe-" + policy["metadata"]["name"]
    fails = {"expression": "false", "message": f"let through to {policy['metadata']['name']}"}
    return [{"apiVersion": policy["apiVersion"], "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
             "spec": {"failurePolicy": "Fail", "matchConstraints": policy["spec"]["matchConstraints"],
                      "matchConditions": policy["spec"]["matchConditions"], "validations": [fails]}},
            {"apiVersion": policy["apiVersion"], "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
             "spec": {"policyName": name, "validationActions": ["Warn"]}}]


def test_may_find_skips_a_gpu_pod_no_check_can_fail(plane):
    """The validating Pod policies' ``may-find`` matchCondition (``validating._may_find``) on the real API server:
    the usual GPU Pod (one container, one device, steered to the dra pool by the compiled MutatingAdmissionPolicy,
    no training job) never reaches the policy's validations; a Pod that some check could fail on does, for each
    check's cheap condition. The equivalence table above runs with the condition in place (what it lets through is
    judged as the webhook judges it); this shows it skips, and evaluates without error."""
    cp, kube = plane
    at = DATES[0]
    applied = _apply_compiled(cp, kube, at)
    warn = next(o for o in applied if o["kind"] == "ValidatingAdmissionPolicy"
                and o["metadata"]["name"].endswith("-pods-warn.dra-migration.io"))
    assert [c["name"] for c in warn["spec"]["matchConditions"]] == ["may-find"]
    probe = _probe(warn)
    for obj in probe:
        kube.create(obj)
    try:
        gpu = _workload("Pod", "usual", "team-a", GPU)  # pilot on DATES[0]: steered to the dra pool
        through = f"let through to {warn['metadata']['name']}"
        eventually(lambda: through in " ".join(_server(kube, _workload("Pod", "x", "team-a", CONTENTS["legacy"]))[1]),
                   "the probe policy in effect", 30)
        allowed, warnings, _, stored = _server(kube, gpu)
        assert allowed and placement(stored) != placement(gpu), "the compiled policy steers it"
        assert not [w for w in warnings if through in w], warnings
        training = _workload("Pod", "training", "team-a", GPU)
        training["metadata"]["labels"] = {"workload.example.com/kind": "training"}
        could = {
            "legacy name": _workload("Pod", "legacy", "team-a", CONTENTS["legacy"]),
            "count over a literal": _workload("Pod", "one-over", "team-a", CONTENTS["one-over"]),
            "two containers": _workload("Pod", "two", "team-a", CONTENTS["at-limit"]),
            "bound": _workload("Pod", "bound", "team-a", STEERING["bound"]),
            "constraint": _workload("Pod", "conflict", "team-a", STEERING["pool-conflict"]),
            "scheduler": _workload("Pod", "kai", "team-a", CONTENTS["other-scheduler"]),
            "training job": training,
        }
        for what, obj in could.items():
            assert through in " ".join(_server(kube, obj)[1]), what
    finally:
        for obj in reversed(probe):
            kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])


def test_validate_reports_a_type_error_of_a_policy(plane, capsys):
    """``compile --validate``: a policy whose CEL does not type-check against the matched kinds is applied (the
    API server accepts it: ``object`` is dynamic when it compiles) and reported from ``status.typeChecking``, exit 1."""
    from webhook.commands import EXIT_NO
    from webhook.commands.compile import validate
    from webhook.compile import Compiled

    cp, _ = plane
    compiled = compile_admission(load_policy(POLICY), dt.datetime(2030, 3, 1, tzinfo=dt.UTC))
    first = next(i for i, o in enumerate(compiled.objects) if o["kind"] == "ValidatingAdmissionPolicy")
    broken = json.loads(json.dumps(compiled.objects[first]))
    broken["metadata"]["name"] = "broken.dra-migration.io"
    broken["spec"]["validations"].append({"expression": "object.spec.noSuchField == 'x'", "message": "broken"})
    binding = json.loads(json.dumps(compiled.objects[first + 1]))
    binding["metadata"]["name"] = binding["spec"]["policyName"] = "broken.dra-migration.io"
    try:
        assert validate(Compiled([broken, binding], None), str(cp.admin_kubeconfig)) == EXIT_NO
        err = capsys.readouterr().err
        assert re.search(r"broken\.dra-migration\.io: type check: spec\.validations\[\d+\]\.expression: .*noSuchField",
                         err), err
    finally:
        kube = Kube(cp.api())
        for plural in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            kube.call("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/broken.dra-migration.io")


def test_validate_deletes_what_is_no_longer_compiled(plane):
    """Before every schedule date all namespaces are legacy: no Deny or Warn policy is compiled, and ``--validate``
    deletes the ones an earlier date's compile applied (else they would go on enforcing the old stage)."""
    cp, kube = plane
    _apply_compiled(cp, kube, DATES[1])
    done = _cli("compile", "--policy", str(POLICY), "--at", "2029-06-01", "-o", "json", "--validate",
                "--kubeconfig", str(cp.admin_kubeconfig))
    assert done.returncode == 0, done.stderr
    stored = {o["metadata"]["name"] for o in kube.call(
        "GET", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies").obj["items"]}
    compiled = {o["metadata"]["name"] for o in json.loads(done.stdout)["items"]
                if o["kind"] == "ValidatingAdmissionPolicy"}
    assert stored == compiled and all(n.endswith("-audit.dra-migration.io") for n in compiled), stored
    gone = "deleted ValidatingAdmissionPolicy compile-e2e-pods-deny.dra-migration.io (no longer compiled)"
    assert gone in done.stderr


def test_validating_policies_see_the_object_after_the_fields_the_strategy_drops(plane):
    """Why ``gated-feature`` is not compiled (webhook/compile/coverage.py). The registry strategy's PrepareForCreate
    drops what a ResourceClaim may not carry on create, its status and every field whose feature gate is off, in one
    step (kubernetes v1.36 ``pkg/registry/resource/resourceclaim/strategy.go`` ``PrepareForCreate``: ``claim.Status =
    ...; dropDisabledSpecFields``), and it runs between mutating and validating admission. So a
    ValidatingAdmissionPolicy never sees such a field; a MutatingAdmissionPolicy does, but cannot warn or deny.
    Shown with the status (every gate is on here): the mutating policy records it saw it, the validating one did not.
    """
    _, kube = plane
    base = "/apis/admissionregistration.k8s.io/v1"
    rules = {"resourceRules": [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                                "resources": ["resourceclaims"]}]}
    seen = "has(object.status) && has(object.status.allocation)"
    objs = [
        ("validatingadmissionpolicies", {"metadata": {"name": "drop-probe"}, "spec": {
            "failurePolicy": "Fail", "matchConstraints": rules,
            "validations": [{"expression": f"!({seen})", "message": "validating policy: status seen"},
                            {"expression": "false", "message": "validating policy: ran"}]}}),
        ("validatingadmissionpolicybindings", {"metadata": {"name": "drop-probe"}, "spec": {
            "policyName": "drop-probe", "validationActions": ["Warn"]}}),
        ("mutatingadmissionpolicies", {"metadata": {"name": "drop-probe"}, "spec": {
            "failurePolicy": "Fail", "reinvocationPolicy": "Never", "matchConstraints": rules,
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'status-seen': string(" + seen
                + ")}}]")}}]}}),
        ("mutatingadmissionpolicybindings", {"metadata": {"name": "drop-probe"}, "spec": {"policyName": "drop-probe"}}),
    ]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "drop-probe", "namespace": "team-a"},
             "spec": {"devices": {"requests": [_exactly("r")]}},
             "status": {"allocation": {"devices": {"results": []}}}}
    kinds = {"validatingadmissionpolicies": "ValidatingAdmissionPolicy",
             "validatingadmissionpolicybindings": "ValidatingAdmissionPolicyBinding",
             "mutatingadmissionpolicies": "MutatingAdmissionPolicy",
             "mutatingadmissionpolicybindings": "MutatingAdmissionPolicyBinding"}
    try:
        for plural, obj in objs:
            kube.call("POST", f"{base}/{plural}",
                      {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kinds[plural], **obj})

        def both_ran() -> Any:
            got = kube.create(claim, dry_run=True)
            ran = any(w.endswith("validating policy: ran") for w in got.warnings)
            return got if ran and "status-seen" in (got.obj["metadata"].get("annotations") or {}) else None

        got = eventually(both_ran, "both probe policies in use", 30)
        assert got.obj["metadata"]["annotations"]["status-seen"] == "true"  # the mutating policy saw it
        assert not any(w.endswith("validating policy: status seen") for w in got.warnings), got.warnings
        assert "allocation" not in (got.obj.get("status") or {})
    finally:
        for plural, obj in objs:
            kube.call("DELETE", f"{base}/{plural}/{obj['metadata']['name']}")


def _delete_compiled(kube: Kube) -> None:
    """Every object ``compile --validate`` applied (its managed-by label), whatever the policy."""
    for plural in ("validatingadmissionpolicybindings", "validatingadmissionpolicies",
                   "mutatingadmissionpolicybindings", "mutatingadmissionpolicies"):
        kube.call("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}",
                  query=[("labelSelector", "app.kubernetes.io/managed-by=dra-webhook-compile")])


def test_the_bundled_policy_compiles_to_objects_the_api_server_accepts(plane):
    """policies/default.yaml, on a date when every stage is in use: applied as is and type-checked clean (the CEL
    cost limits and the compile step are the API server's), then removed."""
    cp, kube = plane
    try:
        done = _cli("compile", "--at", "2027-02-15", "-o", "json", "--validate", "--kubeconfig",
                    str(cp.admin_kubeconfig))
        assert done.returncode == 0, done.stderr
        names = [o["metadata"]["name"] for o in json.loads(done.stdout)["items"] if o["kind"].endswith("Policy")]
        assert len(names) == len(set(names)) >= 4
        checked = [n for n in names if n.endswith(("-deny.dra-migration.io", "-warn.dra-migration.io",
                                                    "-audit.dra-migration.io"))]
        assert done.stderr.count("type check passed") == len(checked) >= 3
    finally:
        _delete_compiled(kube)


def test_a_marker_naming_a_pool_no_longer_configured_keeps_its_path(plane, tmp_path):
    """The policy with its devicePlugin pool removed (the end of a migration) and a resource only that pool served:
    a Pod carrying the old marker (devicePlugin) and a constraint for the dra pool is steered with nothing added, so
    the steering leaves the marker (``node_affinity._mark``: it drops only the configured other pool's), and
    track-rollout writes the path of the pool the marker names (``tracking._path``), as ``check`` does
    (``steering.marker_written``)."""
    cp, kube = plane
    at = DATES[0]
    doc = yaml.safe_load(POLICY.read_text(encoding="utf-8"))
    del doc["spec"]["nodePools"]["devicePlugin"]
    doc["spec"]["resources"].append({"name": "example.com/fpga", "deviceClassName": "fpga.example.com"})
    one = tmp_path / "one-pool.yaml"
    one.write_text(yaml.safe_dump(doc))
    identity = load_policy(one).identity
    fpga = _spec([_c("main", example_com__fpga="1")])
    objs = []
    for name, spec, marker in (("stale-marker-pod", {**fpga, "nodeSelector": {POOL: "dra"}}, "devicePlugin"),
                               ("dra-marker-pod", {**fpga, "nodeSelector": {POOL: "dra"}}, "dra"),
                               ("unmarked-pod", {**fpga, "nodeSelector": {POOL: "dra"}}, None),
                               ("stale-marker-gpu-pod", GPU, "devicePlugin")):
        pod = _workload("Pod", name, "team-a", spec)
        if marker:
            pod["metadata"]["annotations"] = {MARKER: marker}
        objs.append(pod)
    try:
        done = _cli("compile", "--policy", str(one), "--at", at, "-o", "json", "--validate",
                    "--kubeconfig", str(cp.admin_kubeconfig))
        assert done.returncode == 0, done.stderr
        eventually(lambda: _server(kube, _workload("Pod", "probe", "team-a", GPU))[3]["metadata"]
                   .get("annotations", {}).get("dra-migration.io/policy") == identity, "the one-pool policy in use", 30)
        checked = _checked(tmp_path, at, objs, one)
        seen = _compare(kube, objs, checked)
        assert not seen.mismatches, "\n".join(seen.mismatches)
        stale = checked[("Pod", "team-a/stale-marker-pod")]
        assert tracking(_patched(objs[0], stale))["object"]["dra-migration.io/path"] == "device-plugin"  # the case
    finally:
        _delete_compiled(kube)
