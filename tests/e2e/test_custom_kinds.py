"""Issue 14 item 6 (last part) on the real control plane: a CRD named in the policy's ``workloadKinds`` has
its pod templates examined and mutated through the real API server path.

A platform team's own training CRD (a minimal CRD, ``spec`` kept as written with
``x-kubernetes-preserve-unknown-fields``, pod templates at ``spec.roles[*].template``) is installed, the policy
names it, and the webhook configuration rules come from ``dra-webhook lint --webhook-rules`` applied as the
JSON patches it prints (its ``test`` operations included). Then: a CREATE with the device plugin's name is
denied in a migrated namespace; a CREATE in a legacy namespace is steered and annotated; after the namespace
moved to migrated, a label UPDATE leaves every template as stored (issue 14 item 1), and an UPDATE that
changes one template re-steers that one only.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

_conftest = pytest.importorskip("tests.e2e.conftest", reason="the e2e harness (tests/e2e/conftest.py) is not here yet")
_objects = pytest.importorskip("tests.e2e.objects")
_waits = pytest.importorskip("tests.e2e.waits")
_kube = pytest.importorskip("tests.e2e.kube")
_crds = pytest.importorskip("tests.e2e.crds")
installed, preserving_crd = _crds.installed, _crds.preserving_crd
policy_variant, eventually, pod, Denied = _conftest.policy_variant, _waits.eventually, _objects.pod, _kube.Denied

pytestmark = pytest.mark.controllers
ROOT = Path(__file__).resolve().parents[2]
GROUP, KIND, PLURAL = "e2e.example.com", "TrainingRun", "trainingruns"
API = f"{GROUP}/v1"
STAGE, POOL = "dra-migration.io/stage", "dra-migration.io/node-pool"
KINDS = f"""
  workloadKinds:
  - {{group: {GROUP}, kind: {KIND}, podTemplates: ["spec.roles[*].template", spec.launcher.template]}}"""
_kube.RESOURCES.setdefault(KIND, (PLURAL, True))  # so kube.create/get/patch/denial find the CRD's path
CONFIGS = {"MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
           "ValidatingWebhookConfiguration": "validatingwebhookconfigurations"}


def _run(name: str, ns: str, resource: str = "example.com/gpu") -> dict[str, Any]:
    def template(labels: dict[str, str]) -> dict[str, Any]:
        spec = pod("trainer", ns, resource=resource)["spec"]
        spec["restartPolicy"] = "Never"
        return {"metadata": {"labels": labels}, "spec": spec}
    launcher = pod("launcher", ns, resource=None)["spec"]
    return {"apiVersion": API, "kind": KIND, "metadata": {"name": name, "namespace": ns},
            "spec": {"launcher": {"template": {"spec": launcher}},
                     "roles": [{"name": "workers", "replicas": 4, "template": template({"role": "workers"})},
                               {"name": "evaluator", "template": template({"role": "evaluator"})}]}}


@contextmanager
def _webhook_rules(kube: Any, policy_file: Path) -> Iterator[None]:
    """The patches ``dra-webhook lint --webhook-rules`` prints, applied to the installed configurations;
    the configurations as they were afterwards."""
    out = subprocess.run([sys.executable, "-m", "webhook", "lint", str(policy_file), "--webhook-rules"],
                         capture_output=True, text=True, check=True, cwd=ROOT, timeout=120).stdout
    patches = yaml.safe_load(out)["patches"]
    assert {p["target"]["kind"] for p in patches} == set(CONFIGS)
    saved = []
    try:
        for p in patches:
            path = f"/apis/admissionregistration.k8s.io/v1/{CONFIGS[p['target']['kind']]}/{p['target']['name']}"
            saved.append((path, kube.call("GET", path).obj))
            kube.call("PATCH", path, yaml.safe_load(p["patch"]), content_type="application/json-patch+json")
        yield
    finally:
        for path, before in saved:
            now = kube.call("GET", path).obj
            now["webhooks"] = before["webhooks"]
            kube.call("PUT", path, now)


def _template(obj: dict[str, Any], i: int) -> dict[str, Any]:
    return obj["spec"]["roles"][i]["template"]


def _pool(template: dict[str, Any]) -> str | None:
    return (template.get("metadata", {}).get("annotations") or {}).get(POOL)


def test_a_crd_the_policy_names_is_examined_on_create_and_update(kube, namespace, policy, tmp_path):
    text = policy_variant({"  # as policies/default.yaml": "  # as policies/default.yaml" + KINDS})
    (tmp_path / "policy.yaml").write_text(text)
    policy(text)
    with installed(kube, preserving_crd(GROUP, "v1", KIND, PLURAL)), _webhook_rules(kube, tmp_path / "policy.yaml"):
        # CREATE with the device plugin's name in a migrated namespace: denied by the API server's call.
        mig = namespace("mig")
        legacy = _run("legacy-name", mig, resource="vendor.example.com/gpu")
        denied = eventually(lambda: kube.denial(legacy, dry_run=True),
                            "the API server sending TrainingRuns to the webhook", 30)
        assert "legacy-resource-name" in denied.message and "[workers]" in denied.message, denied.message

        # CREATE in a legacy namespace: steered to the device-plugin pool and annotated, per template.
        ns = namespace("late")
        created = kube.create(_run("run", ns)).obj
        assert [_pool(_template(created, i)) for i in (0, 1)] == ["devicePlugin", "devicePlugin"]
        assert _template(created, 0)["spec"]["affinity"]["nodeAffinity"]
        assert "affinity" not in created["spec"]["launcher"]["template"]["spec"]  # asks for no device
        assert created["metadata"]["annotations"][STAGE] == "legacy"

        # The cohort moves to migrated; wait until the webhook's cluster view sees the label.
        kube.patch("v1", "Namespace", ns, {"metadata": {"labels": {"gpu-migration": "migrated"}}})
        eventually(lambda: kube.create(pod("probe", ns), dry_run=True).obj["metadata"]["annotations"][STAGE]
                   == "migrated", "the webhook judges the namespace as migrated", 30)

        # A label UPDATE does not touch any template (no rollout of what the user did not change) ...
        updated = kube.patch(API, KIND, "run", {"metadata": {"labels": {"team": "research"}}}, ns).obj
        assert updated["spec"] == created["spec"]
        assert updated["metadata"]["annotations"][STAGE] == "migrated"  # ... but the webhook did examine it

        # An UPDATE that changes one template re-steers that one only.
        changed = kube.get(API, KIND, "run", ns)
        _template(changed, 1)["spec"]["containers"][0]["image"] = "registry.example.com/trainer:2.0"
        stored = kube.replace(changed).obj
        assert _pool(_template(stored, 1)) == "dra"
        assert _template(stored, 1)["metadata"]["annotations"][STAGE] == "migrated"
        assert _template(stored, 0) == _template(created, 0)
