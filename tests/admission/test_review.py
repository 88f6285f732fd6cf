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
