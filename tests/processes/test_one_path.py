"""One admission path: `check`, `replay`, `test` and the live server give byte-identical AdmissionResponses.

Each request goes through the API server's order: /mutate with the object as submitted, then /validate
with the patched object (same uid). The live server is the real `dra-webhook serve` over TLS.
"""

from __future__ import annotations

import copy
import datetime as dt
import json

import jsonpatch
import orjson
import pytest

from tests.helpers import ROOT, Client, gpu_pod, patch_of, review
from webhook.admission.answer import admit
from webhook.admission.review import parse
from webhook.cli import main as cli
from webhook.commands.replay import judge
from webhook.policy.loader import load

POLICY = ROOT / "tests" / "data" / "live-policy.yaml"  # what the live server serves; stages fixed since 2000

CASES = {  # name: (object, namespace, what the answers must show, so the comparison is not of empties)
    "pilot, patched": (gpu_pod("steered", "pilot-a"), "pilot-a", "patch"),
    "migrated, legacy name denied": (
        gpu_pod("legacy", "mig-a", resource="vendor.example.com/gpu"), "mig-a", "status"),
    "pilot, legacy name warned": (
        gpu_pod("warned", "pilot-a", resource="vendor.example.com/gpu"), "pilot-a", "warnings"),
    "not a GPU workload": ({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": "cm", "namespace": "mig-a"}, "data": {"a": "b"}}, "mig-a", "uid"),
}


def _server(client: Client, doc: dict) -> list[bytes]:
    """The raw bodies the server answers for /mutate, then /validate on the patched object."""
    bodies = []
    status, _, body = client.request("POST", "/mutate", json.dumps(doc).encode(), {"Content-Type": "application/json"})
    assert status == 200
    bodies.append(body)
    mutated = json.loads(body)
    if not mutated["response"]["allowed"]:
        return bodies
    patched = copy.deepcopy(doc)
    patched["request"]["object"] = jsonpatch.apply_patch(doc["request"]["object"], patch_of(mutated))
    status, _, body = client.request("POST", "/validate", json.dumps(patched).encode(),
                                     {"Content-Type": "application/json"})
    assert status == 200
    bodies.append(body)
    return bodies


def _check(doc: dict, tmp_path, capsys: pytest.CaptureFixture[str]) -> list[bytes] | None:
    f = tmp_path / "review.json"
    f.write_text(json.dumps(doc))
    capsys.readouterr()
    cli(["check", "--policy", str(POLICY), "-o", "json", str(f)])
    result = json.loads(capsys.readouterr().out)["results"][0]
    if not result["examined"]:
        # check reports a kind no rule looks at as NOT EXAMINED (issue 14 item 6) instead of an answer;
        # such objects never reach the server (webhook rules list only examined kinds).
        return None
    responses = result["responses"]
    return [orjson.dumps(responses[phase]) for phase in ("mutate", "validate") if phase in responses]


@pytest.mark.parametrize("name", list(CASES))
def test_check_replay_test_and_server_answer_byte_for_byte_the_same(name, client, tmp_path, capsys):
    obj, namespace, shows = CASES[name]
    doc = review(obj, namespace=namespace)
    served = _server(client, doc)
    policy = load(POLICY)
    now = dt.datetime.now(dt.UTC)
    request = parse(json.dumps(doc).encode())
    answers = {
        "server": served,
        "check": _check(doc, tmp_path, capsys),
        "replay": [a.body() for a in judge(request, policy, True, now).answers],
        "test": [a.body() for a in admit(request, policy, None, now).answers],  # what webhook.offline.suites runs
    }
    assert len(served) in (1, 2)
    assert any(shows in json.loads(b)["response"] for b in served), served
    if answers["check"] is None:
        assert doc["request"]["kind"]["kind"] == "ConfigMap"
        del answers["check"]
    for how, bodies in answers.items():
        assert bodies == served, how
