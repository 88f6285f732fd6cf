"""The real server over real TLS: wire format, bad input, health, metrics, policy reload."""

from __future__ import annotations

import base64
import json
import re
import socket
import time

import pytest

from tests.helpers import ROOT, Client, Server, apply_and_validate, gpu_pod, patch_of, review, start_server


def _valid_review() -> dict:
    return review(gpu_pod(namespace="pilot-a"), namespace="pilot-a")


def _with(doc: dict, **changes) -> bytes:
    doc = json.loads(json.dumps(doc))
    for dotted, value in changes.items():
        target = doc
        *parents, last = dotted.split("__")
        for p in parents:
            target = target[p]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value
    return json.dumps(doc).encode()


_DELETE = object()

# (id, body, content type, expected HTTP status, expected substring of the error message)
BAD_INPUT = [
    ("not-json", b"{not json", "application/json", 400, "not valid JSON"),
    ("json-array", b"[1, 2, 3]", "application/json", 400, "JSON array"),
    ("json-string", b'"AdmissionReview"', "application/json", 400, "JSON string"),
    ("empty-body", b"", "application/json", 400, "empty body"),
    ("missing-request", _with(_valid_review(), request=_DELETE), "application/json", 400, "request is missing"),
    ("request-not-object", _with(_valid_review(), request=[1]), "application/json", 400, "request is a JSON array"),
    ("missing-uid", _with(_valid_review(), request__uid=_DELETE), "application/json", 400, "request.uid"),
    ("uid-not-string", _with(_valid_review(), request__uid=42), "application/json", 400, "request.uid"),
    ("wrong-apiversion", _with(_valid_review(), apiVersion="v1"), "application/json", 400,
     "only 'admission.k8s.io/v1'"),
    ("v1beta1", _with(_valid_review(), apiVersion="admission.k8s.io/v1beta1"), "application/json", 400,
     "admissionReviewVersions: [v1]"),
    ("wrong-kind", _with(_valid_review(), kind="Pod"), "application/json", 400, "expected 'AdmissionReview'"),
    ("wrong-content-type", json.dumps(_valid_review()).encode(), "text/plain", 415, "expected 'application/json'"),
    ("no-content-type", json.dumps(_valid_review()).encode(), "", 415, "Content-Type"),
    ("unicode-garbage", "\udcff\u202e\x00ÿ漢".encode("utf-8", "surrogatepass"), "application/json", 400,
     "not valid JSON"),
    ("deeply-nested", b"[" * 5000 + b"]" * 5000, "application/json", 400, "nests 5,000 levels deep"),
    ("latin1-bytes", b'{"a": "\xff\xfe"}', "application/json", 400, "not valid JSON"),
]

# Reviews with a uid but a malformed request: HTTP 200, allowed false, code 400, and the reason.
BAD_REQUESTS = [
    ("null-object-on-create", {"request__object": None}, "request.object is null on CREATE"),
    ("object-wrong-kind", {"request__object": {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                               "metadata": {"name": "x"}}},
     "request.object.kind is 'ResourceClaim' but request.kind.kind is 'Pod'"),
    ("object-is-list", {"request__object": [1, 2]}, "request.object is a JSON array"),
    ("bad-operation", {"request__operation": "PATCH"}, "request.operation is 'PATCH'"),
    ("kind-missing", {"request__kind": _DELETE}, "request.kind must be an object"),
    ("metadata-not-object", {"request__object": {"apiVersion": "v1", "kind": "Pod", "metadata": "x"}},
     "metadata must be an object"),
]


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
@pytest.mark.parametrize(("case", "body", "ctype", "status", "needle"), BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_gets_specific_json_error(client: Client, endpoint, case, body, ctype, status, needle):
    headers = {"Content-Type": ctype} if ctype else {}
    code, resp_headers, data = client.request("POST", endpoint, body, headers)
    assert code == status
    assert resp_headers["content-type"].startswith("application/json")
    err = json.loads(data)
    assert needle in err["error"]
    assert err["status"] == status
    assert "Traceback" not in data.decode()


@pytest.mark.parametrize(("case", "changes", "needle"), BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_malformed_request_is_denied_with_reason(client: Client, case, changes, needle):
    doc = _valid_review()
    body = _with(doc, **changes)
    code, _, data = client.request("POST", "/validate", body, {"Content-Type": "application/json"})
    assert code == 200
    resp = json.loads(data)["response"]
    assert resp["uid"] == doc["request"]["uid"]
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 400
    assert needle in resp["status"]["message"]


def test_oversized_body_is_refused_before_it_is_read(live_server: Server, client: Client):
    """8 MiB announced, nothing sent: the 413 comes back without the server waiting for the body."""
    raw = socket.create_connection(("127.0.0.1", live_server.port), timeout=10)
    with client.ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % (8 << 20))
        tls.sendall(b'{"apiVersion":')
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = tls.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert "larger than 7 MiB" in json.loads(body)["error"]
    assert client.get("/healthz")[0] == 200


def test_unknown_paths_and_methods_answer_json(client: Client):
    code, headers, data = client.request("GET", "/nope")
    assert code == 404 and "no such endpoint /nope" in json.loads(data)["error"]
    code, headers, data = client.request("GET", "/mutate")
    assert code == 405 and "GET is not allowed on /mutate" in json.loads(data)["error"]
    assert headers["content-type"].startswith("application/json")


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed_without_patch(client: Client, operation):
    doc = review(None, kind="Pod", operation=operation, namespace="mig-a",
                 old=gpu_pod(namespace="mig-a", resource="vendor.example.com/gpu"))
    for endpoint in ("/mutate", "/validate"):
        resp = client.admit(endpoint, doc)["response"]
        assert resp["allowed"] is True
        assert "patch" not in resp and "patchType" not in resp


def test_unknown_kind_is_allowed_untouched(client: Client):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "mig-a"},
          "data": {"example.com/gpu": "8"}}
    for endpoint in ("/mutate", "/validate"):
        resp = client.admit(endpoint, review(cm, namespace="mig-a"))["response"]
        assert resp == {"uid": resp["uid"], "allowed": True}


def test_denial_names_rule_stage_and_remediation(client: Client):
    pod = gpu_pod(namespace="mig-a", resource="vendor.example.com/gpu")
    resp = client.admit("/validate", review(pod, namespace="mig-a"))["response"]
    assert resp["allowed"] is False
    status = resp["status"]
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    assert "legacy-resource-name (migrated: Deny)" in status["message"]
    assert "example.com/gpu" in status["message"]  # names the mapped resource
    causes = status["details"]["causes"]
    assert any(c["reason"] == "legacy-resource-name" and c["message"] for c in causes)
    assert "patch" not in resp


def test_same_pod_warns_in_pilot_and_dry_run_gets_same_decision(client: Client):
    pod = gpu_pod(namespace="pilot-a", resource="vendor.example.com/gpu")
    normal = client.admit("/validate", review(pod, namespace="pilot-a"))["response"]
    dry = client.admit("/validate", review(pod, namespace="pilot-a", dry_run=True))["response"]
    assert normal["allowed"] is True
    assert any(w.startswith("legacy-resource-name (pilot)") for w in normal["warnings"])
    assert all(len(w) <= 256 for w in normal["warnings"])
    assert {k: v for k, v in dry.items() if k != "uid"} == {k: v for k, v in normal.items() if k != "uid"}


def test_audit_stage_records_annotation_only(client: Client):
    pod = gpu_pod(namespace="legacy-a", gpus=8)  # above maxPerPod 4, legacy stage -> Audit
    resp = client.admit("/validate", review(pod, namespace="legacy-a"))["response"]
    assert resp["allowed"] is True and "warnings" not in resp
    audit = resp["auditAnnotations"]
    assert "max-devices-per-pod" in audit
    for key in audit:
        assert re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?", key), key


def test_mutation_patch_applies_and_validates_and_is_idempotent(client: Client):
    pod = gpu_pod(namespace="pilot-a", gpus=2)
    body = client.admit("/mutate", review(pod, namespace="pilot-a"))
    resp = body["response"]
    assert resp["allowed"] is True
    base64.b64decode(resp["patch"], validate=True)  # standard, padded base64
    patched = apply_and_validate(pod, body)
    annotations = patched["metadata"]["annotations"]
    assert annotations["dra-migration.io/path"] == "dra-extended-resource"
    assert annotations["dra-migration.io/stage"] == "pilot"
    assert annotations["dra-migration.io/policy"].startswith("live-test@")
    terms = patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "gpu.example.com/allocation", "operator": "In", "values": ["dra"]} in \
        terms["nodeSelectorTerms"][0]["matchExpressions"]
    again = client.admit("/mutate", review(patched, namespace="pilot-a"))["response"]
    assert patch_of({"response": again}) == []


def test_generate_name_pod_without_annotations_gets_whole_map(client: Client):
    pod = gpu_pod(namespace="legacy-a")
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "train-"
    body = client.admit("/mutate", review(pod, namespace="legacy-a"))
    ops = patch_of(body)
    assert ops, "a GPU pod is annotated"
    # Never `add /metadata/annotations/<key>` under a missing map (the API server answers 500).
    assert not any(op["path"].startswith("/metadata/annotations/") for op in ops)
    apply_and_validate(pod, body)


def test_healthz_readyz_and_metrics(live_server: Server, client: Client):
    status, data = client.get("/healthz")
    assert status == 200 and json.loads(data) == {"status": "ok"}
    status, data = client.get("/readyz")
    ready = json.loads(data)
    assert status == 200 and ready["ready"] is True and ready["policy"].startswith("live-test@")
    client.admit("/validate", review(gpu_pod(namespace="mig-a", resource="vendor.example.com/gpu"),
                                     namespace="mig-a"))
    status, data = client.get("/metrics")
    text = data.decode()
    assert status == 200
    assert re.search(r'dra_webhook_admission_requests_total\{allowed="false",endpoint="/validate",kind="Pod",'
                     r'operation="CREATE"\} [1-9]', text), text[:2000]
    assert re.search(r'dra_webhook_rule_findings_total\{action="Deny",rule="legacy-resource-name"\} [1-9]', text)
    assert "dra_webhook_admission_duration_seconds_bucket" in text
    assert re.search(r"dra_webhook_certificate_expiry_timestamp_seconds \d", text)
    assert re.search(r'dra_webhook_policy_reloads_total\{result="success"\} [1-9]', text)


def test_server_healthy_after_bad_input(client: Client):
    for _, body, ctype, _, _ in BAD_INPUT:
        client.request("POST", "/validate", body, {"Content-Type": ctype} if ctype else {})
    assert client.get("/healthz")[0] == 200
    resp = client.admit("/validate", review(gpu_pod(namespace="pilot-a"), namespace="pilot-a"))
    assert resp["response"]["allowed"] is True


def test_broken_reload_keeps_last_good_policy(tmp_path):
    server = start_server(tmp_path, workers=1)
    try:
        client = server.client()
        pod = gpu_pod(namespace="mig-a", resource="vendor.example.com/gpu")
        assert client.admit("/validate", review(pod, namespace="mig-a"))["response"]["allowed"] is False
        policy_file = server.policy_dir / "policy.yaml"
        good = policy_file.read_text()
        policy_file.write_text(good.replace("stage: migrated", "stage: migrate"))
        ready = _wait_for(client, lambda r: r.get("policyError"))
        assert "policy.yaml" in ready["policyError"] and "'migrate' is not one of" in ready["policyError"]
        assert ready["policy"].startswith("live-test@")  # still serving the last good one
        # the old decisions are kept
        assert client.admit("/validate", review(pod, namespace="mig-a"))["response"]["allowed"] is False
        status, data = client.get("/metrics")
        assert re.search(r'dra_webhook_policy_reloads_total\{result="error"\} [1-9]', data.decode())
        # a good change is picked up: Deny -> Warn for migrated
        policy_file.write_text(good.replace("migrated: Deny", "migrated: Warn"))
        _wait_for(client, lambda r: r.get("policyError") is None and r["policy"] != ready["policy"])
        resp = client.admit("/validate", review(pod, namespace="mig-a"))["response"]
        assert resp["allowed"] is True and resp["warnings"]
        assert "policy reload failed" in server.output()
    finally:
        server.stop()


def test_server_with_broken_policy_starts_but_is_not_ready(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text((ROOT / "tests/data/live-policy.yaml").read_text().replace("defaultStage: legacy",
                                                                                  "defaultStage: legacy\n  bogus: 1"))
    server = start_server(tmp_path, broken, workers=1, wait_ready=False)
    try:
        client = server.client()
        status, data = client.get("/readyz")
        body = json.loads(data)
        assert status == 503 and body["ready"] is False
        assert "unknown key 'bogus'" in " ".join(body["problems"])
        resp = client.admit("/validate", review(gpu_pod(namespace="mig-a"), namespace="mig-a"))["response"]
        assert resp["allowed"] is False and resp["status"]["code"] == 500
        resp = client.admit("/mutate", review(gpu_pod(namespace="mig-a"), namespace="mig-a"))["response"]
        assert resp["allowed"] is True and "no valid migration policy" in resp["warnings"][0]
    finally:
        server.stop()


def _wait_for(client: Client, predicate, timeout: float = 10) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = json.loads(client.get("/readyz")[1])
        if predicate(body):
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached: {body}")
        time.sleep(0.1)


def _template(namespace: str, labels: dict | None = None, **exactly) -> dict:
    tmpl = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-template", "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", **exactly}}]}}},
    }
    if labels:
        tmpl["spec"]["metadata"] = {"labels": labels}
    return tmpl


def test_training_template_gets_tolerations_over_tls(client: Client):
    tmpl = _template("pilot-a", {"workload.example.com/kind": "training"}, count=2)
    body = client.admit("/mutate", review(tmpl, namespace="pilot-a"))
    patched = apply_and_validate(tmpl, body)
    assert patched["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] == [
        {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3600}]
    assert patched["metadata"]["annotations"]["dra-migration.io/path"] == "dra-claim"
    # validating the mutated template passes; a second mutating pass is a no-op
    assert client.admit("/validate", review(patched, namespace="pilot-a"))["response"]["allowed"] is True
    assert patch_of(client.admit("/mutate", review(patched, namespace="pilot-a"))) == []


def test_claim_rules_deny_over_tls_and_update_passes(client: Client):
    tmpl = _template("mig-a", allocationMode="All")
    resp = client.admit("/validate", review(tmpl, namespace="mig-a"))["response"]
    assert resp["allowed"] is False
    assert "allocation-mode-all (migrated: Deny)" in resp["status"]["message"]
    causes = {c["reason"]: c.get("field") for c in resp["status"]["details"]["causes"]}
    assert causes["allocation-mode-all"] == "spec.spec.devices.requests[0].exactly.allocationMode"
    # an UPDATE (status write, finalizer) is never judged: specs are immutable
    upd = client.admit("/validate", review(tmpl, namespace="mig-a", operation="UPDATE", old=tmpl))["response"]
    assert upd == {"uid": upd["uid"], "allowed": True}


def test_gated_feature_denied_in_mutating_phase(client: Client):
    pod = gpu_pod(namespace="pilot-a")
    pod["spec"]["schedulingGroup"] = {"podGroupName": "trainers"}
    resp = client.admit("/mutate", review(pod, namespace="pilot-a"))["response"]
    assert resp["allowed"] is False and "patch" not in resp
    assert "spec.schedulingGroup needs feature gate GenericWorkload" in resp["status"]["message"]
