"""kubernetes/kubernetes#141290 by cluster version: extended-resource Pods are not evicted by device taints up to
the release that ships PR #142289, and are after it (webhook/gates/eviction.py); the policy can state it.

Both sides for the pure decision, for ``preflight`` (analysis and command, the version read from the fake
API server's discovery ``/version``) and for the ``taint_unevictable`` gauge.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from tests.builders.gauges import scenario as gauge_scenario
from tests.builders.preflight import DRIVER, MAINT, analyse, extended_pod_and_claim
from tests.fakeapi import POLICY_DOC, FakeAPI, make_policy
from webhook.cli import main
from webhook.fleet import gauges
from webhook.fleet.preflight import AT_ONCE, NEVER, DeviceSelector
from webhook.gates import eviction as extended_eviction
from webhook.gates.eviction import decide, has_fix, parse_version

# A hypothetical table in which the fix shipped in 1.37.2 (the real table is empty: PR #142289 is open).
LANDED = ((1, 37, 2),)


@pytest.mark.parametrize(("text", "version"), [
    ("v1.37.0", (1, 37, 0)), ("v1.37.2-eks-1a2b3c", (1, 37, 2)), ("1.36.2+k3s1", (1, 36, 2)),
    ("", None), (None, None), ("garbage", None),
])
def test_parse_version(text: str | None, version: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == version


@pytest.mark.parametrize(("version", "fixed"), [
    ((1, 36, 9), False), ((1, 37, 0), False), ((1, 37, 1), False), ((1, 37, 2), True), ((1, 37, 5), True),
    ((1, 38, 0), True),
])
def test_the_fix_counts_from_its_patch_release(version: tuple[int, int, int], fixed: bool) -> None:
    assert has_fix(version, LANDED) is fixed


def test_no_released_version_has_the_fix_today() -> None:
    """1.36 and 1.37.0 are right to say 'never evicted'; with the shipped table every version is."""
    assert extended_eviction.FIXED_IN == ()
    for text in ("v1.36.2", "v1.37.0", "v1.37.9"):
        assert decide("auto", text).evicted is False
    assert "unknown" in decide("auto", None).why


def test_policy_overrides_the_version() -> None:
    assert decide("evicted", "v1.36.2").evicted is True
    assert decide("notEvicted", "v1.37.2", LANDED).evicted is False
    assert decide("auto", "v1.37.2", LANDED).evicted is True
    assert "1.37.2 ships the fix" in decide("auto", "v1.37.2", LANDED).why


def test_preflight_analysis_both_sides() -> None:
    p, claim = extended_pod_and_claim()
    before = analyse(DeviceSelector(DRIVER), MAINT, [claim], [p], make_policy())
    assert before.pods[0].eviction.outcome == NEVER and not before.blocked
    from webhook.fleet import preflight
    from webhook.fleet.preflight import claim_use, pod_use

    use = claim_use(claim, DeviceSelector(DRIVER), MAINT)
    assert use is not None
    after = preflight.analyse(DeviceSelector(DRIVER), MAINT, [use], [pod_use(p, make_policy())], make_policy(),
                              extended_evicted=True)
    assert after.pods[0].eviction.outcome == AT_ONCE and after.blocked
    assert not any("141290" in n and "drain" in n for n in after.notes)


def _policy_file(tmp_path: Path, mode: str | None) -> str:
    doc = json.loads(json.dumps(POLICY_DOC))
    if mode is not None:
        doc["spec"]["extendedResourceTaintEviction"] = mode
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


@pytest.mark.parametrize(("git_version", "mode", "fixed_in", "outcome"), [
    ("v1.37.0", None, (), "never"),             # today's releases
    ("v1.37.2", None, LANDED, "at-once"),       # the release with the fix, read from /version
    ("v1.37.0", "evicted", (), "at-once"),      # the policy states it
    ("v1.37.2", "notEvicted", LANDED, "never"),
    (None, None, LANDED, "never"),              # /version unreadable: what every released version does
])
def test_preflight_command_reads_the_cluster_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    git_version: str | None, mode: str | None, fixed_in: tuple, outcome: str,
) -> None:
    monkeypatch.setattr(extended_eviction, "FIXED_IN", fixed_in)
    p, claim = extended_pod_and_claim()
    with FakeAPI() as fake:
        fake.git_version = git_version
        fake.put(p, claim)
        code = main(["preflight", "--driver", DRIVER, "-o", "json", "--kubeconfig", fake.write_kubeconfig(tmp_path),
                     "--policy", _policy_file(tmp_path, mode)])
    out = json.loads(capsys.readouterr().out)
    assert out["pods"][0]["outcome"] == outcome
    assert code == (3 if outcome == "at-once" else 0)
    assert any("extended-resource Pods" in n for n in out["notes"])


def test_gauge_both_sides() -> None:
    def unevictable(objs: gauges.ClusterObjects, policy=None) -> float:  # noqa: ANN001
        got = gauges.samples(policy or make_policy(), dt_now(), objs)
        return sum(v for n, labels, v in got if n == "dra_webhook_migration_taint_unevictable_pods"
                   and labels == {"cohort": "pilot-teams"})

    assert unevictable(dataclasses.replace(gauge_scenario(), server_version="v1.37.0")) == 2
    policy = make_policy()
    spec = policy.source.spec.model_copy(update={"extendedResourceTaintEviction": "evicted"})
    evicting = dataclasses.replace(policy, source=policy.source.model_copy(update={"spec": spec}))
    assert unevictable(dataclasses.replace(gauge_scenario(), server_version="v1.37.0"), evicting) == 0


def dt_now():  # noqa: ANN201
    from tests.builders.gauges import NOW

    return NOW


def test_training_job_advice_follows_the_policys_statement() -> None:
    """training-job-extended-resource: never moved (today), or evicted at once where the policy says the
    cluster has the fix; the remediation (a template with tolerations) stays either way."""
    from tests.builders.pods import POLICY, _training_ctx, manifest
    from webhook.rules.pods import training_job_extended_resource

    pod = manifest("pod-training", "pilot-a")
    (today,) = training_job_extended_resource(pod, _training_ctx()).findings
    assert "keeps running on a device under maintenance" in today.message
    assert "drained by" in today.remediation
    spec = POLICY.source.spec.model_copy(update={"extendedResourceTaintEviction": "evicted"})
    fixed = dataclasses.replace(POLICY, source=POLICY.source.model_copy(update={"spec": spec}))
    ctx = dataclasses.replace(_training_ctx(), policy=fixed)
    (after,) = training_job_extended_resource(pod, ctx).findings
    assert "evicts it at once, with no checkpoint window" in after.message
    assert "drained by" not in after.remediation and after.remediation.startswith("use a ResourceClaimTemplate")
