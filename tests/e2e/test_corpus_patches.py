"""Issue 13 item 6: every patch the test corpora produce is accepted by the real API server.

The corpora are run offline through the engine exactly as their own tests run them (the policy suites
under policies/tests, the published manifests of tests/data/upstream, the Pod/workload case table of
tests/data/pods and the claim fixtures of tests/data/claims); every object the mutating answer changed is
then created on the real v1.36.2 API server with ``?dryRun=All`` and must get a 2xx: the API server's own
validation (names, label values, tolerations, node affinity, annotations) accepts what the webhook wrote.

- The installed webhook serves a policy whose every stage is Audit and whose mutating rules are Off, so it
  neither patches nor refuses what is being checked: the answer is the API server's alone. Objects go to a
  fresh namespace labelled ``resource.kubernetes.io/admin-access: "true"`` (the API server allows
  ``adminAccess`` only there); names become ``generateName`` (dry-run objects are never stored, and the
  suite's own DeviceClass must not collide).
- Kinds the API server does not serve (custom resources: JobSet, Kubeflow, LeaderWorkerSet, KubeRay,
  Volcano; versions 1.36 lacks) are checked by what the webhook writes into them: each pod template as a
  v1 PodTemplate and the object's metadata on a ConfigMap.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.builders import ADMIN_ACCESS, HANDS_OFF, _dry_run
from webhook.policy.loader import load

ROOT = Path(__file__).resolve().parents[2]

Mutated = tuple[str, dict[str, Any]]


# --------------------------------------------------------------------------------------------- corpora


def _from_suites() -> Iterator[Mutated]:
    """policies/tests/*.yaml, as `dra-webhook test` runs them (webhook.offline.suites)."""
    from webhook.admission.answer import admit
    from webhook.offline.inputs import parse_time
    from webhook.offline.suites import _Runner, case_items, find_suites, parse_suite
    from webhook.offline.views import SuiteView

    files, broken = find_suites([ROOT / "policies"])
    assert files and not broken, broken
    runner = _Runner()
    for file in files:
        suite, problems = parse_suite(file)
        assert suite is not None, problems
        policy, problems = runner.policy(suite)
        assert policy is not None, problems
        m = suite.model
        for i, case in enumerate(m.cases):
            at = case.at or m.at
            now = parse_time(at) if at else dt.datetime.now(dt.UTC)
            cluster = case.cluster or m.cluster
            view = SuiteView(cluster) if cluster is not None else None
            for item in case_items(suite, i, case, case.namespace or m.namespace, case.operation or m.operation):
                if case.oldObject is not None:
                    item.request.old_object = case.oldObject
                actual = admit(item.request, policy, view, now)
                if actual.patch:
                    yield f"{file.relative_to(ROOT)}: {case.name}", actual.final


def _from_files(data: Path, at: str, cases: list[tuple[str, str | None]]) -> Iterator[Mutated]:
    """Manifests read as `dra-webhook check` reads them, judged under ``data/policy.yaml`` at ``at``."""
    from webhook.admission.answer import admit
    from webhook.offline.inputs import parse_time, read_items

    policy = load(data / "policy.yaml")
    for name, namespace in cases:
        for item in read_items(str(data / name), namespace, "CREATE"):
            actual = admit(item.request, policy, None, parse_time(at))
            if actual.patch:
                yield f"{(data / name).relative_to(ROOT)} ({item.source})", actual.final


def _from_upstream() -> Iterator[Mutated]:
    data = ROOT / "tests" / "data" / "upstream"
    cases = yaml.safe_load((data / "cases.yaml").read_text())
    yield from _from_files(data, "2026-12-03", [(c["file"], c.get("namespace")) for c in cases])


def _from_claims() -> Iterator[Mutated]:
    data = ROOT / "tests" / "data" / "claims"
    files = sorted(p.name for p in data.glob("*.yaml") if p.name != "policy.yaml")
    yield from _from_files(data, "2026-12-15", [(f, "ml-a") for f in files])


def _from_pod_cases() -> Iterator[Mutated]:
    """tests/data/pods/cases.yaml, through the runner of tests/rules/test_pods.py (tests/builders/pods.py)."""
    from tests.builders.pods import CASES, build_view, manifest, run

    for case in CASES:
        ns = case["namespace"]
        obj = manifest(case["object"], ns, case.get("merge"))
        old = manifest(case["old"], ns) if case.get("old") else None
        res = run(obj, ns, case.get("operation", "CREATE"), old, build_view(case.get("view")))
        if res.patch:
            yield f"tests/data/pods/cases.yaml: {case['name']}", res.patched


def mutated_objects() -> list[Mutated]:
    return [*_from_suites(), *_from_upstream(), *_from_claims(), *_from_pod_cases()]


# ------------------------------------------------------------------------------------------ dry run


def test_every_corpus_patch_is_accepted_by_the_api_server(kube, namespace, policy):
    policy(HANDS_OFF)
    ns = namespace("corpus", ADMIN_ACCESS)
    mutated = mutated_objects()
    kinds = {o["kind"] for _, o in mutated}
    # The corpora must keep exercising what the webhook writes into each family of objects.
    assert {"Pod", "Deployment", "Job", "ResourceClaim", "ResourceClaimTemplate"} <= kinds, kinds
    assert len(mutated) >= 40, len(mutated)
    refused = [f"{where}: {obj['kind']} {obj.get('metadata', {}).get('name')}: {said}"
               for where, obj in mutated if (said := _dry_run(kube, obj, ns)) is not None]
    assert refused == [], "\n".join(refused)

    # Not vacuous: the same path refuses what an unchecked policy could have written (a toleration key that
    # is no label name), as 422 from the API server's validation.
    claim = next(o for _, o in mutated if o["kind"] == "ResourceClaim" and _tolerations(o))
    broken = copy.deepcopy(claim)
    _tolerations(broken)[0]["key"] = "example.com/not a label name"
    said = _dry_run(kube, broken, ns)
    assert said is not None and said.startswith("HTTP 422") and "tolerations[0].key" in said, said


def _tolerations(claim: dict[str, Any]) -> list[dict[str, Any]]:
    """The first request's tolerations of a claim (the list itself, to edit), or []."""
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or [{}]
    return (requests[0].get("exactly") or {}).get("tolerations") or []
