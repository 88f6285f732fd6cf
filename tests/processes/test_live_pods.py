"""The Pod/workload case table (tests/data/pods/cases.yaml), a representative subset over the live TLS server.

Each case goes through HTTPS exactly as the API server would drive it: POST /mutate, apply the patch with
jsonpatch, schema-check it (Kubernetes 1.37, strict), POST /validate with the patched object; and the
answers must equal what the engine decides in-process for the same case (tests/rules/test_pods.py).
"""

from __future__ import annotations

import jsonpatch
import pytest

from tests.builders.pods import CASES, NATIVE_KINDS, NOW, manifest, run
from tests.helpers import ROOT, apply_and_validate, patch_of, review, start_server

# Cases whose decision does not depend on a cluster view or on today's date.
LIVE = [c for c in CASES if not c.get("view") and not c["namespace"].startswith("sched-")]


@pytest.fixture(scope="module")
def pods_server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("pods"), ROOT / "tests" / "data" / "pods" / "policy.yaml")
    yield server
    server.stop()


def test_enough_live_cases():
    assert len(LIVE) >= 30
    assert {c["namespace"] for c in LIVE} >= {"batch", "pilot-a", "mig-a"}


@pytest.mark.parametrize("case", LIVE, ids=[c["name"] for c in LIVE])
def test_live_case_matches_engine(pods_server, case):
    ns = case["namespace"]
    obj = manifest(case["object"], ns, case.get("merge"))
    old = manifest(case["old"], ns) if case.get("old") else None
    operation = case.get("operation", "CREATE")
    expected = run(obj, ns, operation, old, now=NOW)  # in-process engine, same policy file

    client = pods_server.client()
    try:
        mutate = client.admit("/mutate", review(obj, namespace=ns, operation=operation, old=old))
        if not mutate["response"]["allowed"]:
            assert expected.allowed is False
            return
        assert patch_of(mutate) == expected.patch
        if obj["kind"] in NATIVE_KINDS:
            patched = apply_and_validate(obj, mutate)
        else:  # JobSet/PyTorchJob: CRDs have no 1.37 schema; test_pod_rules checks their pod templates
            patched = jsonpatch.apply_patch(obj, patch_of(mutate))
        assert patched == expected.patched
        validate = client.admit("/validate", review(patched, namespace=ns, operation=operation, old=old))
        resp = validate["response"]
        assert resp["allowed"] is expected.allowed, (resp, expected.message)
        got_warnings = [*mutate["response"].get("warnings", []), *resp.get("warnings", [])]
        assert got_warnings == expected.warnings
        if not expected.allowed:
            assert resp["status"]["code"] == 403
            assert resp["status"]["message"] == expected.message
        assert case["expect"]["allowed"] is resp["allowed"]
    finally:
        client.close()
