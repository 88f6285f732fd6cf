"""Issue 27 item 4 on the real control plane: manifests of the public corpus (tests/data/upstream), rewritten by
`dra-webhook convert --claims`, are accepted by the API server with the webhook installed (migrated stage, same
policy), and the Pods made from them get their devices through claims the real kube-scheduler allocates on the
DRA node: a Deployment (ROCm's vLLM server, amd.com/gpu) through the deployment and ReplicaSet controllers, a Job
(Kueue's provisioning sample, nvidia.com/gpu, generateName) through the job controller, and a LeaderWorkerSet
(its CRD installed; no LWS controller here, so the test creates the Pods of each converted template, as that
controller would). The resourceclaim controller makes each Pod's claim from the generated ResourceClaimTemplate.

The policy is the e2e one with the corpus's device plugin names as legacy names of ``example.com/gpu``
(DeviceClass ``gpu.example.com``, the suite's driver): the names in the manifests are what a fleet moving off
those device plugins has in git.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import policy_variant
from tests.e2e.kube import RESOURCES
from tests.e2e.objects import GPU_DRIVER, GPU_NODE
from tests.e2e.waits import eventually
from webhook.cli import main

pytestmark = pytest.mark.controllers
UPSTREAM = Path(__file__).resolve().parents[1] / "data" / "upstream"
LEGACY_NAMES = {"legacyNames: [vendor.example.com/gpu]":
                "legacyNames: [vendor.example.com/gpu, nvidia.com/gpu, amd.com/gpu]"}
UNMAPPED = policy_variant(LEGACY_NAMES)
# Issue 45 item 1: the cluster's Kueue maps the suite's GPU class (its Configuration resources.deviceClassMappings),
# as the policy states, so convert rewrites Kueue-queued jobs (Kueue's provisioning sample) into claims.
POLICY = policy_variant({**LEGACY_NAMES, "  defaultStage: legacy\n": "  defaultStage: legacy\n  quota:\n    kueue:\n"
                         "      deviceClassMappings: [{name: example.com/gpu, deviceClassNames: [gpu.example.com]}]\n"})
LWS_GROUP, LWS_KIND, LWS_PLURAL = "leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
RESOURCES.setdefault(LWS_KIND, (LWS_PLURAL, True))


def _converted(tmp_path: Path, name: str, ns: str, kind: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The corpus file converted with ``--claims`` (in place, on a copy), its objects moved to ``ns``:
    (generated ResourceClaimTemplates, the workload)."""
    (tmp_path / "policy.yaml").write_text(POLICY)
    src = tmp_path / name
    src.write_text((UPSTREAM / name).read_text())
    assert main(["convert", "-w", "--claims", "--policy", str(tmp_path / "policy.yaml"), str(src)]) == 0
    docs = [d for d in yaml.safe_load_all(src.read_text()) if d]
    for d in docs:
        d["metadata"]["namespace"] = ns
    templates = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
    (workload,) = [d for d in docs if d["kind"] == kind]
    assert templates, "convert generated no ResourceClaimTemplate"
    return templates, workload


def _allocated(kube: Any, ns: str, selector: str, count: int) -> list[tuple[dict, dict]]:
    """(Pod, claim) for ``count`` Pods matching ``selector``, each bound with its claim allocated."""
    def probe() -> list[tuple[dict, dict]] | None:
        pods = kube.list("v1", "Pod", ns, selector)
        if len(pods) < count:
            return None
        out = []
        for p in pods:
            statuses = p.get("status", {}).get("resourceClaimStatuses") or []
            if not p["spec"].get("nodeName") or len(statuses) != 1 or not statuses[0].get("resourceClaimName"):
                return None
            c = kube.get("resource.k8s.io/v1", "ResourceClaim", statuses[0]["resourceClaimName"], ns)
            if not c.get("status", {}).get("allocation"):
                return None
            out.append((p, c))
        return out
    return eventually(probe, f"{count} Pods ({selector}) bound with their claims allocated", 60)


def _assert_on_dra_node(pairs: list[tuple[dict, dict]], request: str) -> None:
    for p, c in pairs:
        assert p["spec"]["nodeName"] == GPU_NODE
        assert "extendedResourceClaimStatus" not in p.get("status", {})  # explicit claims, no scheduler claim
        results = c["status"]["allocation"]["devices"]["results"]
        assert [(r["driver"], r["request"]) for r in results] == [(GPU_DRIVER, request)]


@pytest.fixture()
def converted_policy(policy: Any) -> None:
    policy(POLICY)


def test_converted_deployment(kube, namespace, converted_policy, tmp_path):
    ns = namespace("mig")
    templates, deployment = _converted(tmp_path, "amd-vllm-serve-deployment.yaml", ns, "Deployment")
    for t in templates:
        kube.create(t)
    created = kube.create(deployment).obj
    assert created["metadata"]["annotations"]["dra-migration.io/path"] == "dra-claim"
    pairs = _allocated(kube, ns, "app=mistral-7b", 1)
    _assert_on_dra_node(pairs, "mistral-7b")


def test_converted_job(kube, namespace, converted_policy, tmp_path, capsys):
    """Kueue's provisioning sample (label kueue.x-k8s.io/queue-name): left alone while the policy does not say
    Kueue maps the class (docs/running-beside-other-systems.md "Kueue (quota)"), converted once it does; the
    webhook admits the converted Job on the dra-claim path, and its Pods get the devices through their claims, the
    queue label kept."""
    ns = namespace("mig")
    (tmp_path / "unmapped.yaml").write_text(UNMAPPED)
    src = tmp_path / "as-is.yaml"
    src.write_text((UPSTREAM / "kueue-provisioning-job.yaml").read_text())
    assert main(["convert", "-w", "--claims", "--policy", str(tmp_path / "unmapped.yaml"), str(src)]) == 0
    assert src.read_text() == (UPSTREAM / "kueue-provisioning-job.yaml").read_text()
    assert "does not map DeviceClass gpu.example.com" in capsys.readouterr().err
    templates, job = _converted(tmp_path, "kueue-provisioning-job.yaml", ns, "Job")
    for t in templates:
        kube.create(t)
    created = kube.create(job).obj
    assert created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "user-queue"
    assert created["metadata"]["annotations"]["dra-migration.io/path"] == "dra-claim"
    name = created["metadata"]["name"]  # generateName: sample-job-xxxxx
    pairs = _allocated(kube, ns, f"batch.kubernetes.io/job-name={name}", 3)
    _assert_on_dra_node(pairs, "dummy-job")
    assert len({c["metadata"]["name"] for _, c in pairs}) == 3  # a claim per Pod, from the one template


@contextmanager
def _lws_crd(kube: Any) -> Iterator[None]:
    name = f"{LWS_PLURAL}.{LWS_GROUP}"
    spec = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    kube.call("POST", CRDS, {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": name},
        "spec": {"group": LWS_GROUP, "scope": "Namespaced",
                 "names": {"plural": LWS_PLURAL, "singular": "leaderworkerset", "kind": LWS_KIND,
                           "listKind": f"{LWS_KIND}List"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}}}]}})
    try:
        eventually(lambda: any(c["type"] == "Established" and c["status"] == "True"
                               for c in kube.call("GET", f"{CRDS}/{name}").obj.get("status", {}).get("conditions", [])),
                   f"CRD {name} established", 60)
        eventually(lambda: kube.call("GET", f"/apis/{LWS_GROUP}/v1/namespaces/default/{LWS_PLURAL}"), "LWS served", 30)
        yield
    finally:
        kube.call("DELETE", f"{CRDS}/{name}")


def test_converted_leaderworkerset(kube, namespace, converted_policy, tmp_path):
    ns = namespace("mig")
    templates, lws = _converted(tmp_path, "lws-sglang.yaml", ns, LWS_KIND)
    assert sorted(t["metadata"]["name"] for t in templates) == ["sglang-leader-gpu", "sglang-worker-gpu"]
    with _lws_crd(kube):
        for t in templates:
            kube.create(t)
        created = eventually(lambda: kube.create(lws).obj, "the LeaderWorkerSet created", 30)
        assert created["metadata"]["annotations"]["dra-migration.io/path"] == "dra-claim"
        base = created["spec"]["leaderWorkerTemplate"]
        for role, template in (("leader", base["leaderTemplate"]), ("worker", base["workerTemplate"])):
            # What the LWS controller does: a Pod from the stored template (no kubelet: no grace period).
            meta = template.get("metadata") or {}
            kube.create({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": f"sglang-{role}", "namespace": ns,
                                      "labels": {**(meta.get("labels") or {}), "e2e-convert": role}},
                         "spec": {**template["spec"], "terminationGracePeriodSeconds": 0}})
            _assert_on_dra_node(_allocated(kube, ns, f"e2e-convert={role}", 1), f"sglang-{role}")


def _corpus_rewrites() -> list[tuple[str, dict[str, Any]]]:
    """Every object `convert` writes for the public corpus (both forms, corpus policy, migrated cohort)."""
    import datetime as dt

    from webhook.convert.file import Settings, convert_text
    from webhook.convert.plan import pinned
    from webhook.policy.loader import load

    out = []
    for claims in (False, True):
        settings = Settings(pinned(load(UPSTREAM / "policy.yaml"), "migrated"), "migrated", "ml-train", claims,
                            dt.datetime.now(dt.UTC))
        for path in sorted(UPSTREAM.glob("*.yaml")):
            if path.name in ("policy.yaml", "cases.yaml"):
                continue
            result = convert_text(str(path), path.read_text(), settings)
            names = {e.object.rsplit("/", 1)[-1].split()[-1] for e in result.entries if e.status == "converted"}
            names |= {g.split()[-1] for e in result.entries for g in e.generated}
            for obj in yaml.safe_load_all(result.after):
                meta = (obj or {}).get("metadata") or {}
                if (meta.get("name") or str(meta.get("generateName", "")).rstrip("-")) in names:
                    out.append((f"{path.name} (claims={claims})", obj))
    return out


def test_every_corpus_rewrite_is_accepted_by_the_api_server(kube, namespace, policy):
    """Issue 27 "Done when": the objects convert changes in the corpus are accepted by the real API server (dry run;
    kinds not served here as their pod templates and metadata), with a hands-off webhook so the answer is the API
    server's own (`check` accepting them is tests/convert/test_convert.py)."""
    from tests.e2e.builders import ADMIN_ACCESS, HANDS_OFF, _dry_run

    policy(HANDS_OFF)
    ns = namespace("convert", ADMIN_ACCESS)
    rewrites = _corpus_rewrites()
    kinds = {o["kind"] for _, o in rewrites}
    assert {"Pod", "Job", "ResourceClaimTemplate", "LeaderWorkerSet", "MPIJob"} <= kinds, kinds
    assert len(rewrites) >= 30, len(rewrites)  # 41 objects when written (16 workloads, 20 templates, both forms)
    refused = [f"{where}: {obj['kind']} {obj['metadata'].get('name')}: {said}"
               for where, obj in rewrites if (said := _dry_run(kube, obj, ns)) is not None]
    assert refused == [], "\n".join(refused)
