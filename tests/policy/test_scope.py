"""Scope to the migration (issue #24 item 11): claim rules, toleration injection and the report look only at
requests for the DeviceClasses and DRA drivers under migration.

The CPU driver's DeviceClass and claim come from kubernetes-sigs/dra-driver-cpu (tests/data/claims, sources
in each file). Other tests of this file vary the class names only.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders.scope import DATA, MIGRATED, _scenario, gpu_claim, load, policy
from tests.fakeapi import FakeAPI
from tests.fakeapi import device_class as fake_class
from tests.helpers import review
from webhook.admission.answer import admit as admit_chain
from webhook.admission.review import parse_request
from webhook.cli import main
from webhook.fleet import gauges
from webhook.fleet.report import build_report
from webhook.offline.views import StaticView
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy, compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.policy.scope import class_drivers, scope_of
from webhook.rules import claims, tolerations
from webhook.rules.base import Context
from webhook.rules.view import ClusterView, OfflineView


def device_class(name: str, driver: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def admit(obj: dict[str, Any], pol: CompiledPolicy, view: ClusterView | None = None) -> Any:
    return admit_chain(parse_request(review(obj)["request"]), pol, view, MIGRATED)


def ctx(pol: CompiledPolicy, view: ClusterView | None = None) -> Context:
    cohort = pol.cohort_for("ml-a", None)
    return Context(policy=pol, kind="ResourceClaim", group="resource.k8s.io", version="v1", operation="CREATE",
                   namespace="ml-a", phase="validate", now=MIGRATED, cohort=cohort,
                   stage=pol.stage_for(cohort, MIGRATED), view=view or OfflineView())


def test_cpu_driver_claim_is_admitted_untouched_while_a_gpu_claim_is_judged() -> None:
    cpu = load("claim-dracpu.yaml")
    admitted = admit(cpu, policy())
    assert admitted.mutate.allowed and admitted.mutate.patch == []  # no tolerations injected, no annotation
    assert admitted.validate is not None and admitted.validate.allowed and admitted.validate.verdicts == []
    gpu = admit(gpu_claim(), policy())
    assert gpu.mutate.patch  # the training job's tolerations
    assert gpu.validate is not None and gpu.validate.denied_rules == [ids.DEVICE_COUNT_EXCEEDS]


def test_every_scoped_rule_leaves_the_cpu_claim_alone() -> None:
    cpu = load("claim-dracpu.yaml")
    body = cpu["spec"]["devices"]["requests"][0]["exactly"]
    body.update(allocationMode="All", tolerations=[{"operator": "Exists"}])
    del body["count"]
    c = ctx(policy())
    for fn in (claims.device_count_exceeds, claims.allocation_mode_all, tolerations.toleration_too_broad,
               tolerations.inject_device_tolerations):
        assert fn(copy.deepcopy(cpu), c).findings == [], fn.__name__
    assert tolerations.inject_device_tolerations(cpu, c).mutated is None
    body["deviceClassName"] = "gpu.example.com"
    assert claims.allocation_mode_all(cpu, c).findings
    assert tolerations.toleration_too_broad(cpu, c).findings


def test_the_allowlist_leaves_a_class_the_cluster_shows_is_another_drivers() -> None:
    doc = load("policy.yaml")
    del doc["spec"]["migration"]
    pol = compile_policy(MigrationPolicy.model_validate(doc), yaml.safe_dump(doc).encode())
    view = StaticView(device_classes=[load("deviceclass-dracpu.yaml")])
    assert not claims.device_class_not_allowed(load("claim-dracpu.yaml"), ctx(pol, view)).findings
    # Offline dra.cpu could be a mistyped GPU class: the allowlist still judges it.
    assert claims.device_class_not_allowed(load("claim-dracpu.yaml"), ctx(pol)).findings


def test_default_drivers_come_from_the_mapped_classes_when_the_cluster_has_them() -> None:
    view = StaticView(device_classes=[device_class("gpu.example.com", "gpu.example.com"),
                                      device_class("gpu-large.example.com", "gpu.example.com"),
                                      load("deviceclass-dracpu.yaml")])
    c = ctx(policy(), view)
    assert claims.device_count_exceeds(gpu_claim("gpu-large.example.com"), c).findings  # same driver
    assert not claims.device_count_exceeds(load("claim-dracpu.yaml"), c).findings
    # Offline the driver is unknown: only the mapped class names count.
    assert not claims.device_count_exceeds(gpu_claim("gpu-large.example.com"), ctx(policy())).findings


def test_explicit_drivers_and_classes() -> None:
    view = StaticView(device_classes=[load("deviceclass-dracpu.yaml")])
    by_driver = policy(drivers=["dra.cpu"])
    assert claims.device_count_exceeds(load("claim-dracpu.yaml"), ctx(by_driver, view)).findings
    assert claims.device_count_exceeds(gpu_claim(), ctx(by_driver, view)).findings  # mapped class kept
    by_class = policy(deviceClasses=["dra.cpu"])
    assert claims.device_count_exceeds(load("claim-dracpu.yaml"), ctx(by_class)).findings
    assert not claims.device_count_exceeds(gpu_claim(), ctx(by_class)).findings


def test_allocation_mode_all_can_be_allowed_for_some_classes() -> None:
    doc = load("policy.yaml")  # gpu.example.com and nic.example.com are both under migration
    doc["spec"]["claims"]["allocationModeAllClasses"] = ["nic.example.com"]
    pol = compile_policy(MigrationPolicy.model_validate(doc), yaml.safe_dump(doc).encode())
    obj = gpu_claim()
    gpu = obj["spec"]["devices"]["requests"][0]
    del gpu["exactly"]["count"]
    gpu["exactly"]["allocationMode"] = "All"
    obj["spec"]["devices"]["requests"].append({"name": "nic", "exactly": {**gpu["exactly"],
                                                                        "deviceClassName": "nic.example.com"}})
    found = claims.allocation_mode_all(obj, ctx(pol)).findings
    assert [f.paths for f in found] == [("spec.devices.requests[0].exactly.allocationMode",)]
    assert len(claims.allocation_mode_all(obj, ctx(policy(deviceClasses=["gpu.example.com",
                                                                         "nic.example.com"]))).findings) == 2


@pytest.mark.parametrize(("expr", "drivers"), [
    ('device.driver == "gpu.nvidia.com"', {"gpu.nvidia.com"}),
    ("'dra.net' == device.driver && device.attributes['dra.net'].rdma", {"dra.net"}),
    ('device.attributes["gpu.example.com"].model == "x"', set()),
])
def test_class_drivers_reads_the_cel_driver_pin(expr: str, drivers: set[str]) -> None:
    cls = {"spec": {"selectors": [{"cel": {"expression": expr}}]}}
    assert class_drivers(cls) == drivers


def test_a_policy_without_mapped_classes_judges_every_claim() -> None:
    assert scope_of((), None, None).covers("anything", None)
    assert not scope_of(["gpu"], None, None).covers("anything", None)
    assert not scope_of((), [], None).covers("anything", None)


def test_the_gauges_count_only_the_gpu_claim_pod() -> None:
    pods = [(labels, value) for name, labels, value in gauges.samples(policy(), MIGRATED, _scenario())
            if name == "dra_webhook_migration_pods" and value]
    assert [(labels["actual"], value) for labels, value in pods] == [("dra-claim", 1)]


def test_report_does_not_count_a_cpu_claim_pod_as_migrated() -> None:
    objs = _scenario()
    report = build_report(policy(), MIGRATED, objs.namespaces, objs.pods, objs.claims, objs.device_classes)
    assert [(p.name, p.actual) for p in report.pods] == [("gpu-pod", "dra-claim")]
    row = next(n for n in report.namespaces if n.name == "ml-a")
    assert dict(row.actual) == {"dra-claim": 1} and dict(row.intended) == {}


def test_lint_explains_the_scope_offline_and_with_the_cluster(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(_without_migration((DATA / "policy.yaml").read_text()))
    assert main(["lint", "--at", "2026-12-01", str(path)]) == 0
    out = capsys.readouterr().out
    assert "DeviceClasses under migration (the classes resources map): gpu.example.com" in out
    assert "DRA drivers under migration: not known offline" in out
    with FakeAPI() as api:
        api.put(fake_class("gpu.example.com", "example.com/gpu", driver="gpu.example.com"),
                load("deviceclass-dracpu.yaml"))
        kubeconfig = api.write_kubeconfig(tmp_path)
        assert main(["lint", "--at", "2026-12-01", "--kubeconfig", kubeconfig, str(path)]) == 0
    out = capsys.readouterr().out
    assert "DRA drivers under migration (read from those DeviceClasses' device.driver selectors): " \
           "gpu.example.com" in out
    assert "dra.cpu" not in out


def _without_migration(text: str) -> str:
    """The claim tests' policy with its spec.migration block removed (the default scope)."""
    lines = text.splitlines()
    start = lines.index("  migration:")
    return "\n".join(lines[:start] + lines[start + 3:]) + "\n"


def _pod_with_cpu_claim(gpus: int) -> dict[str, Any]:
    limits = {"example.com/gpu": gpus} if gpus else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml-a"},
            "spec": {"resourceClaims": [{"name": "cpus", "resourceClaimTemplateName": "cpus"}],
                     "containers": [{"name": "c", "image": "registry.example.com/app:1",
                                     "resources": {"limits": limits, "claims": [{"name": "cpus"}]}}]}}


def _cpu_template() -> dict[str, Any]:
    claim = load("claim-dracpu.yaml")
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "cpus", "namespace": "ml-a"}, "spec": {"spec": claim["spec"]}}


@pytest.mark.parametrize(("gpus", "path"), [(1, "dra-extended-resource"), (0, None)])
def test_a_pods_path_leaves_out_another_drivers_claim(gpus: int, path: str | None) -> None:
    view = StaticView(device_classes=[load("deviceclass-dracpu.yaml")], resource_claim_templates=[_cpu_template()])
    patch = admit(_pod_with_cpu_claim(gpus), policy(), view).mutate.patch
    written = {k: v for op in patch if op["path"] == "/metadata/annotations" for k, v in op["value"].items()}
    assert written.get("dra-migration.io/path") == path
    # The view cannot show the template: the claim counts as the migration's, as before.
    offline = admit(_pod_with_cpu_claim(gpus), policy()).mutate.patch
    assert any(op["path"] == "/metadata/annotations" and op["value"].get("dra-migration.io/path")
               == ("mixed" if gpus else "dra-claim") for op in offline)


def test_lint_warns_when_the_migration_leaves_out_a_mapped_class(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    text = (DATA / "policy.yaml").read_text().replace(
        "deviceClasses: [gpu.example.com, nic.example.com, legacy-gpu.example.com]", "deviceClasses: [nic.example.com]")
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    assert main(["lint", "--at", "2026-12-01", str(path)]) == 0
    out = capsys.readouterr().out
    assert "warning: spec.resources[0].deviceClassName: DeviceClass 'gpu.example.com' serves example.com/gpu but " \
           "is not in spec.migration.deviceClasses" in out
    path.write_text(text.replace("deviceClasses: [nic.example.com]",
                                 "deviceClasses: [nic.example.com]\n    drivers: [gpu.example.com]"))
    assert main(["lint", "--at", "2026-12-01", str(path)]) == 0
    assert "warning" not in capsys.readouterr().out
