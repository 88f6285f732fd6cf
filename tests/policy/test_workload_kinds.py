"""Issue 14 item 6, last part: the pod templates of any CRD the policy names (``spec.workloadKinds``) are
examined and mutated exactly as a built-in workload kind's, including the UPDATE semantics of item 1.

Paths are checked when the policy loads (file:line); ``check`` examines the named kinds; ``lint
--webhook-rules`` prints the kustomize patches that route them to the webhook, and the shipped
``uses-devices`` matchCondition sends them (it passes every kind it does not list). The same is shown
on the real API server in tests/e2e/test_custom_kinds.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.builders.pods import DATA, pool_of, run
from webhook.commands import check as check_cmd
from webhook.commands import lint as lint_cmd
from webhook.objects.pods import pod_templates
from webhook.policy import workload_kinds as custom_kinds
from webhook.policy.loader import PolicyError, load
from webhook.rules.ruleset import standard_rules

ROOT = Path(__file__).resolve().parents[2]
STAGE = "dra-migration.io/stage"
KINDS = """\
  workloadKinds:
  - group: example.com
    kind: TrainingRun
    podTemplates: ["spec.roles[*].template", spec.launcher.template]
  - {group: example.com, kind: ReplicaGroup, podTemplates: ["spec.replicaSpecs.*.template"], resource: replicagroups}
"""


def policy_file(tmp: Path, kinds: str = KINDS) -> Path:
    """The pod-rule test policy (tests/data/pods/policy.yaml, whose ``spec`` is last) plus ``kinds``."""
    out = tmp / "policy.yaml"
    out.write_text((DATA / "policy.yaml").read_text().rstrip("\n") + "\n" + kinds)
    return out


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load(policy_file(tmp_path_factory.mktemp("custom")))


def gpu_spec(resource: str = "example.com/gpu") -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "registry.example.com/trainer:1.0",
                            "resources": {"limits": {resource: 1}}}]}


def training_run(ns: str, resource: str = "example.com/gpu") -> dict[str, Any]:
    """A TrainingRun: a launcher without devices and two roles asking for ``resource``."""
    return {"apiVersion": "example.com/v1", "kind": "TrainingRun", "metadata": {"name": "run", "namespace": ns},
            "spec": {"launcher": {"template": {"spec": {"containers": [{"name": "l", "image": "i"}]}}},
                     "roles": [{"name": "workers", "replicas": 4, "template": {"spec": gpu_spec(resource)}},
                               {"name": "evaluator", "template": {"metadata": {"labels": {"app": "eval"}},
                                                                  "spec": gpu_spec(resource)}}]}}


def role(obj: dict[str, Any], i: int) -> dict[str, Any]:
    return obj["spec"]["roles"][i]["template"]


def run_as(obj: dict[str, Any], ns: str, policy: Any, operation: str = "CREATE",
           old: dict[str, Any] | None = None) -> Any:
    return run(obj, ns, operation, old, policy=policy)


# ---------------------------------------------------------------------------------------------- paths


@pytest.mark.parametrize("text,steps", [
    ("spec.template", ("spec", "template")),
    ("spec.roles[*].template", ("spec", "roles", "[*]", "template")),
    ("spec.replicaSpecs.*.template", ("spec", "replicaSpecs", "*", "template")),
    ("spec.groups[*][*].template", ("spec", "groups", "[*]", "[*]", "template")),
    ("template", ("template",)),
])
def test_path_syntax(text: str, steps: tuple[str, ...]) -> None:
    assert custom_kinds.parse_path(text) == steps
    assert custom_kinds.path_text(steps) == text


@pytest.mark.parametrize("paths,message", [
    ('["spec.roles[0].template"]', "'spec.roles[0].template' is not a pod template path: 'roles[0]' is neither"),
    ('["spec..template"]', "'' is neither a field name"),
    ("[spec.template.spec]", "it ends at 'spec', inside a template"),
    ("[spec.template.metadata]", "it ends at 'metadata'"),
    ("[spec.template.spec.containers]", "'containers' is a field of a pod spec"),
    ("[metadata.template]", "it starts at 'metadata'; pod templates live in the object's spec"),
    ("[status.template]", "it starts at 'status'"),
    ("[spec.a.template, spec.a.template.x.template]", "a pod template cannot lie inside another"),
    ("[spec.template, spec.template]", "'spec.template' is listed twice"),
    ("[]", "list should have at least 1 item"),
])
def test_bad_paths_are_policy_errors_with_file_and_line(tmp_path: Path, paths: str, message: str) -> None:
    kinds = f"  workloadKinds:\n  - group: example.com\n    kind: TrainingRun\n    podTemplates: {paths}\n"
    f = policy_file(tmp_path, kinds)
    with pytest.raises(PolicyError) as exc:
        load(f)
    text = str(exc.value)
    assert len(exc.value.problems) == 1, text
    line = f.read_text().splitlines().index(f"    podTemplates: {paths}") + 1
    assert text.startswith(f"{f}:{line}: spec.workloadKinds[0].podTemplates"), text
    assert message in text, text


@pytest.mark.parametrize("entry,where,message", [
    ("{group: example, kind: TrainingRun, podTemplates: [spec.template]}", "group",
     "'example' is not a CRD group: a DNS subdomain with at least one dot"),
    ("{group: example.com, kind: training_run, podTemplates: [spec.template]}", "kind", "is not a kind"),
    ("{group: apps, kind: Deployment, podTemplates: [spec.template]}", "group", "is not a CRD group"),
    ("{group: jobset.x-k8s.io, kind: JobSet, podTemplates: [spec.template]}", "",
     "jobset.x-k8s.io/JobSet is a built-in workload kind, examined already: remove it"),
    ("{group: resource.k8s.io, kind: ResourceClaimTemplate, podTemplates: [spec.template]}", "",
     "the webhook has rules of its own for resource.k8s.io kinds"),
    ("{group: example.com, kind: TrainingRun, podTemplate: [spec.template]}", "podTemplate",
     "unknown key 'podTemplate' (did you mean 'podTemplates'?)"),
    ("{group: example.com, kind: TrainingRun, podTemplates: [spec.template], versions: [V1]}", "versions[0]",
     "'V1' is not an API version"),
])
def test_bad_entries_are_policy_errors(tmp_path: Path, entry: str, where: str, message: str) -> None:
    f = policy_file(tmp_path, f"  workloadKinds:\n  - {entry}\n")
    with pytest.raises(PolicyError) as exc:
        load(f)
    text = str(exc.value)
    assert f"spec.workloadKinds[0]{'.' + where if where else ''}: " in text and message in text, text


def test_a_kind_named_twice_is_an_error_at_the_second(tmp_path: Path) -> None:
    kinds = KINDS + "  - {group: example.com, kind: TrainingRun, podTemplates: [spec.template]}\n"
    f = policy_file(tmp_path, kinds)
    with pytest.raises(PolicyError) as exc:
        load(f)
    assert "spec.workloadKinds[2].kind: example.com/TrainingRun is listed twice" in str(exc.value)


def test_paths_are_compiled_once_and_find_every_template(policy: Any) -> None:
    kind = policy.workload_kinds[("example.com", "TrainingRun")]
    assert [p.steps for p in kind.paths] == [("spec", "roles", "[*]", "template"), ("spec", "launcher", "template")]
    obj = training_run("team-a")
    refs = kind.find(obj)
    assert [(r.path, r.name) for r in refs] == [
        (("spec", "roles", 0, "template"), "workers"), (("spec", "roles", 1, "template"), "evaluator"),
        (("spec", "launcher", "template"), "spec.launcher.template")]
    group = {"apiVersion": "example.com/v1", "kind": "ReplicaGroup",
             "spec": {"replicaSpecs": {"Chief": {"template": {"spec": gpu_spec()}}, "Worker": {"template": 3}}}}
    refs = policy.workload_kinds[("example.com", "ReplicaGroup")].find(group)
    assert [(r.path, r.name) for r in refs] == [(("spec", "replicaSpecs", "Chief", "template"), "Chief")]
    # Wrong shapes are "no template", never an exception.
    for bad in ({"spec": {"roles": {"a": 1}}}, {"spec": {"roles": [1, None, []]}}, {"spec": []}, {}):
        assert kind.find(bad) == []


def test_pod_templates_see_the_named_kinds_only_when_given_the_policys_finders(policy: Any) -> None:
    obj = training_run("team-a")
    assert pod_templates(obj, "TrainingRun") == []
    assert len(pod_templates(obj, "TrainingRun", named=policy.template_finders)) == 3
    assert pod_templates(obj, "TrainingRun", "other.example.com", policy.template_finders) == []  # group AND kind


# ------------------------------------------------------------------------------------------ admission


def test_create_with_a_legacy_name_is_denied_in_a_migrated_namespace(policy: Any) -> None:
    res = run_as(training_run("mig-a", "vendor.example.com/gpu"), "mig-a", policy)
    assert not res.allowed
    assert res.findings["legacy-resource-name"] == "Deny"
    assert "[workers]" in res.message and "spec.roles[0].template.spec.containers[0]" in json.dumps(
        [v.finding.paths for v in res.verdicts])


def test_create_is_steered_and_tracked_like_a_built_in_workload(policy: Any) -> None:
    res = run_as(training_run("pilot-a"), "pilot-a", policy)
    assert res.allowed
    for i in (0, 1):
        assert pool_of(role(res.patched, i)) == "dra"
        assert role(res.patched, i)["metadata"]["annotations"][STAGE] == "pilot"
    assert res.patched["metadata"]["annotations"][STAGE] == "pilot"
    launcher = res.patched["spec"]["launcher"]["template"]
    assert "affinity" not in launcher["spec"] and "metadata" not in launcher  # asks for no device


def test_the_same_object_is_not_examined_under_a_policy_that_does_not_name_it() -> None:
    res = run(training_run("mig-a", "vendor.example.com/gpu"), "mig-a")  # tests/data/pods/policy.yaml
    assert res.allowed and res.patch == [] and res.findings == {}


def _admitted_in_legacy(policy: Any) -> dict[str, Any]:
    stored = run_as(training_run("late-a"), "late-a", policy).patched
    assert pool_of(role(stored, 0)) == "devicePlugin"
    stored["metadata"]["namespace"] = "pilot-a"  # the cohort's stage moved since
    return stored


def test_update_that_leaves_the_templates_alone_does_not_rewrite_them(policy: Any) -> None:
    old = _admitted_in_legacy(policy)
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "research"}
    new["spec"]["roles"][0]["replicas"] = 8  # outside the template: no rollout of the template
    res = run_as(new, "pilot-a", policy, "UPDATE", old)
    assert res.allowed
    assert res.patched["spec"] == new["spec"], res.patch
    assert not any(op["path"].startswith("/spec") for op in res.patch), res.patch
    assert res.patched["metadata"]["annotations"][STAGE] == "pilot"  # the object's own metadata is current


def test_update_that_changes_one_template_resteers_only_that_one(policy: Any) -> None:
    old = _admitted_in_legacy(policy)
    new = copy.deepcopy(old)
    role(new, 1)["spec"]["containers"][0]["image"] = "registry.example.com/trainer:2.0"
    res = run_as(new, "pilot-a", policy, "UPDATE", old)
    assert res.allowed
    assert pool_of(role(res.patched, 1)) == "dra" and role(res.patched, 1)["metadata"]["annotations"][STAGE] == "pilot"
    assert role(res.patched, 0) == role(old, 0)  # untouched: the user did not change it


def test_named_kinds_get_every_rule_a_built_in_workload_gets() -> None:
    for phase in ("mutate", "validate"):
        for op in ("CREATE", "UPDATE"):
            got = {r.id for r in standard_rules().for_workloads(phase, op)}
            for kind in ("Deployment", "JobSet", "RayCluster", "DaemonSet"):
                per_kind = {r.id for r in standard_rules().select(kind, phase, op)} - {"shared-claim-limit"}
                assert got == per_kind, (phase, op, kind)
    assert "steer-node-pool" in {r.id for r in standard_rules().for_workloads("mutate", "UPDATE")}


# ---------------------------------------------------------------------------------------------- check


def test_check_examines_the_kinds_the_policy_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump(training_run("mig-a", "vendor.example.com/gpu")))
    code = check_cmd.run(check_cmd_args(f, "--fail-on-unexamined"))
    out = capsys.readouterr().out
    assert code == 3 and "NOT EXAMINED" in out and "name it in the policy's spec.workloadKinds" in out, out
    code = check_cmd.run(check_cmd_args(f, "--fail-on-unexamined", "--policy", str(policy_file(tmp_path))))
    out = capsys.readouterr().out
    assert code == 1 and "DENIED [stage migrated" in out and "legacy-resource-name" in out, out


def check_cmd_args(*argv: Any) -> Any:
    from webhook.cli import build_parser

    return build_parser().parse_args(["check", *map(str, argv)])


# ----------------------------------------------------------------------------- webhook configuration


def _configs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "webhooks.yaml").read_text()) if d]


def test_lint_prints_kustomize_patches_that_route_the_kinds_to_the_workload_webhooks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.cli import build_parser

    args = build_parser().parse_args(["lint", str(policy_file(tmp_path)), "--webhook-rules"])
    assert lint_cmd.run(args) == 0
    snippet = yaml.safe_load(capsys.readouterr().out)
    configs = {c["kind"]: c for c in _configs()}
    assert len(snippet["patches"]) == 2
    for entry in snippet["patches"]:
        config = configs[entry["target"]["kind"]]
        assert entry["target"]["name"] == config["metadata"]["name"]
        patched = jsonpatch.apply_patch(config, yaml.safe_load(entry["patch"]))  # its `test` op must hold
        hook = patched["webhooks"][0]
        assert hook["name"].startswith("workloads.")
        added = hook["rules"][-2:]
        assert [(r["apiGroups"], r["resources"], r["apiVersions"]) for r in added] == [
            (["example.com"], ["trainingruns"], ["*"]), (["example.com"], ["replicagroups"], ["*"])]
        assert all(r["operations"] == ["CREATE", "UPDATE"] and r["scope"] == "Namespaced" for r in added)


def test_the_shipped_conditions_send_a_named_kind_even_without_devices() -> None:
    """The decision for named CRDs: no condition to add. ``uses-devices`` passes every kind it does not list
    (here an object with no device at all), so each CREATE and template-changing UPDATE reaches the webhook."""
    from tests.builders.match_conditions import HOOKS, request, sent

    obj = training_run("team-a")
    for r in obj["spec"]["roles"]:
        r["template"]["spec"] = {"containers": [{"name": "c", "image": "i"}]}
    old = copy.deepcopy(obj)
    role(obj, 0)["spec"]["containers"][0]["image"] = "j"
    for name in [n for n in HOOKS if n.startswith("workloads.")]:
        for op, before in (("CREATE", None), ("UPDATE", old)):
            req = request("TrainingRun", op, group="example.com", version="v1")
            assert sent(name, req, obj, before), (name, op)


def test_the_printed_patches_render_with_the_real_kustomize(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil
    import subprocess

    from tests.builders.deploy import KUSTOMIZE_MAJOR
    from webhook.cli import build_parser

    if KUSTOMIZE_MAJOR is None or KUSTOMIZE_MAJOR < 5:
        pytest.skip("needs kubectl with kustomize v5+ on PATH")
    assert lint_cmd.run(build_parser().parse_args(["lint", str(policy_file(tmp_path)), "--webhook-rules"])) == 0
    snippet = capsys.readouterr().out
    shutil.copytree(ROOT / "deploy" / "base", tmp_path / "deploy" / "base")
    overlay = tmp_path / "deploy" / "overlays" / "crds"
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text("resources:\n- ../../base\n" + snippet)
    out = subprocess.run([shutil.which("kubectl") or "kubectl", "kustomize", str(overlay)], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    hooks = {h["name"]: h for d in yaml.safe_load_all(out) if d and d["kind"].endswith("WebhookConfiguration")
             for h in d["webhooks"]}
    for name, hook in hooks.items():
        ours = [r for r in hook["rules"] if r["apiGroups"] == ["example.com"]]
        assert [r["resources"] for r in ours] == ([[ "trainingruns"], ["replicagroups"]]
                                                 if name.startswith("workloads.") else []), name


# ------------------------------------------------------------------------------- a published CRD object


def test_the_bundled_policy_examines_spark_applications(capsys: pytest.CaptureFixture[str]) -> None:
    """kubeflow/spark-operator's published pod-template example, and two GPU copies of it (tests/data/custom-kinds),
    under the bundled policy in a migrated namespace: examined, the legacy name denied, the migrated one steered."""
    from webhook.cli import main

    f = ROOT / "tests" / "data" / "custom-kinds" / "spark-pi-pod-template.yaml"
    code = main(["check", "-o", "json", "-n", "ml-team", "--at", "2027-02-02", "--fail-on-unexamined", str(f)])
    results = json.loads(capsys.readouterr().out)["results"]
    assert code == 1
    plain, legacy, migrated = results
    assert all(r["examined"] and r["stage"] == "migrated" for r in results)
    assert plain["allowed"] and plain["patch"] == [] and plain["findings"] == []
    assert not legacy["allowed"] and [f["rule"] for f in legacy["findings"]] == ["legacy-resource-name"]
    assert "[spec.executor.template]" in legacy["findings"][0]["message"]
    assert migrated["allowed"] and migrated["findings"] == []
    ops = {op["path"]: op["value"] for op in migrated["patch"]}
    assert ops["/spec/executor/template/metadata/annotations/dra-migration.io~1node-pool"] == "dra"
    assert "/spec/executor/template/spec/affinity" in ops
    assert not any(p.startswith("/spec/driver") for p in ops)  # the driver asks for no device


def test_a_named_kind_called_like_a_dra_kind_is_still_a_workload(tmp_path: Path) -> None:
    """Dispatch on group AND kind: ``example.com/ResourceClaimTemplate`` is a workload, not a claim template."""
    kinds = "  workloadKinds:\n  - {group: example.com, kind: ResourceClaimTemplate, podTemplates: [spec.template]}\n"
    policy = load(policy_file(tmp_path, kinds))
    obj = {"apiVersion": "example.com/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "x"},
           "spec": {"template": {"spec": gpu_spec()}}}
    res = run_as(obj, "pilot-a", policy)
    assert pool_of(res.patched["spec"]["template"]) == "dra"
    assert res.patched["spec"]["template"]["metadata"]["annotations"][STAGE] == "pilot"
