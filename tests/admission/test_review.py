"""webhook.admission.review: the response stays within what the API server accepts
(docs/webhook-conventions.md §1.2)."""

from __future__ import annotations

import base64
import json
import re

import jsonpatch

from webhook.admission import answer as admission
from webhook.admission import review
from webhook.admission.answer import AdmissionResponse

KEY = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")


def test_warnings_are_cut_to_256_and_4096_in_total():
    long = ["w" * 300] + [f"warning {i} " + "x" * 200 for i in range(30)]
    kept = review.limit_warnings(long)
    assert all(len(w) <= 256 for w in kept)
    assert sum(len(w) for w in kept) <= 4096
    assert kept[0].endswith("…") and len(kept[0]) == 256
    assert kept[-1].endswith("more warning(s) omitted; `dra-webhook check` lists them all")
    assert review.limit_warnings(["two\nlines\there"]) == ["two lines here"]


def test_audit_keys_are_valid_qualified_name_parts():
    keys = review.clean_audit({
        "dra-migration.io/path": "a", "legacy-resource-name": "b", "x" * 80: "c", "/weird key/": "d", "": "e",
    })
    assert all(KEY.fullmatch(k) for k in keys), keys
    assert keys["legacy-resource-name"] == "b"
    assert keys["dra-migration.io-path"] == "a"


def test_denial_and_patch_shapes():
    denied = AdmissionResponse("u1", False, message="no", causes=[{"reason": "r", "message": "fix"}]).review()
    assert denied == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
        "uid": "u1", "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "no", "details": {"causes": [
            {"reason": "r", "message": "fix"}]}}}}
    ops = [{"op": "add", "path": "/metadata/annotations", "value": {"a/b": "c"}}]
    allowed = AdmissionResponse("u2", True, patch=ops).review()["response"]
    assert allowed["patchType"] == "JSONPatch"
    decoded = json.loads(base64.b64decode(allowed["patch"], validate=True))  # standard, padded base64
    assert jsonpatch.apply_patch({"metadata": {}}, decoded) == {"metadata": {"annotations": {"a/b": "c"}}}
    # no patch: neither patch nor patchType (a patchType alone is a call error)
    assert "patchType" not in AdmissionResponse("u3", True, patch=[]).review()["response"]


def test_bad_request_is_code_400():
    err = review.RequestError("u4", "request.object is null on CREATE")
    resp = admission.malformed(err).review()["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 400 and resp["status"]["reason"] == "BadRequest"


def _deep_pod_review(levels: int) -> tuple[str, bytes]:
    """A GPU Pod review with ``levels`` nested objects under a container's field (the container is at level 6:
    review, request, object, spec, containers, the container; so the review nests 6 + levels deep)."""
    from tests.helpers import gpu_pod
    from tests.helpers import review as make_review

    doc = make_review(gpu_pod("deep", "pilot-a"), namespace="pilot-a")
    doc["request"]["object"]["spec"]["containers"][0]["extra"] = "NEST"
    nest = b'{"x": ' * (levels - 1) + b"{}" + b"}" * (levels - 1)
    return doc["request"]["uid"], json.dumps(doc).encode().replace(b'"NEST"', nest)


def test_a_review_nested_past_the_limit_is_a_clear_400_with_its_uid():
    """Issue 47 item 6: 330-1,024 levels (orjson parses up to 1,024) took the rules and the patch diff past Python's
    recursion limit: the mutation was skipped and a traceback logged. Now refused before parsing, uid echoed."""
    for levels in (340, 1000, 1100):
        uid, body = _deep_pod_review(levels)
        try:
            review.parse(body)
        except review.RequestError as exc:
            resp = admission.malformed(exc).review()["response"]
        else:
            raise AssertionError(f"{levels} levels parsed")
        assert resp["uid"] == uid and resp["allowed"] is False
        assert resp["status"]["code"] == 400 and resp["status"]["reason"] == "BadRequest"
        assert f"nests {levels + 6:,} levels deep, more than the webhook's limit of 250" in resp["status"]["message"]


def test_a_review_nested_within_the_limit_is_judged_and_patched():
    import datetime as dt

    from tests.helpers import ROOT
    from webhook.policy.loader import load
    from webhook.rules.view import OfflineView

    _uid, body = _deep_pod_review(240)
    req = review.parse(body)
    answer = admission.handle(req, "mutate", load(ROOT / "tests" / "data" / "live-policy.yaml"), OfflineView(),
                              dt.datetime.now(dt.UTC))
    assert answer.allowed and answer.patch and not [v for v in answer.verdicts if v.failed]


def test_a_body_with_no_uid_over_the_budget_is_an_envelope_error_with_the_status():
    try:
        review.parse(b"[" * 5000 + b"]" * 5000)
    except review.EnvelopeError as exc:
        assert exc.status == 400 and "nests 5,000 levels deep" in exc.message and "refused unparsed" in exc.message
    else:
        raise AssertionError("parsed")
