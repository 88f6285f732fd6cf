"""kubernetes/kubernetes#141290 by cluster version: extended-resource Pods are not evicted by device taints up to
the release that ships PR #142289 (1.38.0; webhook/gates/fixes.py), and are after it (webhook/gates/eviction.py);
the policy can state it.

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
from tests.builders.preflight import DRIVER, MAINT, analyse, extended_pod_and_claim, run_preflight
from tests.fakeapi import POLICY_DOC, make_policy
from webhook.fleet import gauges
from webhook.fleet.preflight import AT_ONCE, NEVER, DeviceSelector
from webhook.gates import eviction as extended_eviction
from webhook.gates.eviction import decide, has_fix, parse_version

# A hypothetical table in which the fix also shipped in 1.37.2 (no 1.37 patch is known to carry it).
LANDED = ((1, 37, 2),)


@pytest.mark.parametrize(("text", "version"), [
    ("v1.37.0", (1, 37, 0)), ("v1.37.2-eks-1a2b3c", (1, 37, 2)), ("1.36.2+k3s1", (1, 36, 2)),
    ("v1.38.0-alpha.1", (1, 38, 0)), ("1.38", (1, 38, 0)), ("", None), (None, None), ("garbage", None),
])
def test_parse_version(text: str | None, version: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == version


@pytest.mark.parametrize(("version", "fixed"), [
    ((1, 36, 9), False), ((1, 37, 0), False), ((1, 37, 1), False), ((1, 37, 2), True), ((1, 37, 5), True),
    ((1, 38, 0), True),
])
def test_the_fix_counts_from_its_patch_release(version: tuple[int, int, int], fixed: bool) -> None:
    assert has_fix(version, LANDED) is fixed


def test_1_38_0_has_the_fix_and_no_1_37_patch_does() -> None:
    """Issue 46 item 2: PR #142289 is in v1.38.0-alpha.1 (CHANGELOG-1.38.md), so 1.38.0 evicts at once."""
    assert extended_eviction.FIXED_IN == ((1, 38, 0),)
    for text in ("v1.36.2", "v1.37.0", "v1.37.9"):
        assert decide("auto", text).evicted is False
    for text in ("v1.38.0", "v1.38.0-alpha.1", "v1.38.3-gke.100", "v1.39.0"):
        assert decide("auto", text).evicted is True, text
    assert "1.38.0 ships the fix for kubernetes/kubernetes#141290" in decide("auto", "v1.38.0").why
    assert "unknown" in decide("auto", None).why
    # No readable version: the policy's kubernetesVersion (its .0 release) decides.
    assert decide("auto", None, policy_version="1.38").evicted is True
    assert decide("auto", None, policy_version="1.37").evicted is False
    assert "policy kubernetesVersion 1.38.0" in decide("auto", None, policy_version="1.38").why
    assert decide("auto", "v1.37.0", policy_version="1.38").evicted is False  # the cluster's answer first


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
    ("v1.37.0", None, (), "never"),             # no release in the table
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
    code, out = run_preflight(tmp_path, capsys, [*extended_pod_and_claim()], ["--driver", DRIVER], git_version,
                              _policy_file(tmp_path, mode))
    assert out["pods"][0]["outcome"] == outcome
    assert code == (3 if outcome == "at-once" else 0)
    assert any("extended-resource Pods" in n for n in out["notes"])


@pytest.mark.parametrize(("git_version", "outcome", "code"), [("v1.38.0", "at-once", 3), ("v1.37.0", "never", 0)])
def test_preflight_answers_as_each_version_behaves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], git_version: str, outcome: str, code: int,
) -> None:
    """Issue 46 item 2, with the shipped table: a fake /version of v1.38.0 evicts the training job at once
    (exit 3, a maintenance pipeline gated on it stops); v1.37.0 never evicts it (exit 0, drain by hand)."""
    got, out = run_preflight(tmp_path, capsys, [*extended_pod_and_claim()], ["--driver", DRIVER], git_version,
                             _policy_file(tmp_path, None))
    assert out["pods"][0]["outcome"] == outcome and got == code and out["exitCode"] == code
    text = " ".join(out["notes"])
    if code == 3:
        assert f"are evicted by device taints: cluster version {git_version[1:]} ships the fix" in text
        assert "drain" not in text
    else:
        assert "are not evicted by device taints" in text


def test_gauge_both_sides() -> None:
    def unevictable(objs: gauges.ClusterObjects, policy=None) -> float:  # noqa: ANN001
        got = gauges.samples(policy or make_policy(), dt_now(), objs)
        return sum(v for n, labels, v in got if n == "dra_webhook_migration_taint_unevictable_pods"
                   and labels == {"cohort": "pilot-teams"})

    assert unevictable(dataclasses.replace(gauge_scenario(), server_version="v1.37.0")) == 2
    assert unevictable(dataclasses.replace(gauge_scenario(), server_version="v1.38.0")) == 0  # issue 46 item 2
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


def test_training_job_advice_on_a_1_38_policy_says_evicted_at_once() -> None:
    """training-job-extended-resource, issue 46 item 2: ``auto`` with kubernetesVersion 1.38 (PR #142289 in
    1.38.0) says the job is evicted at once; 1.37 says it keeps running."""
    from tests.builders.pods import POLICY, _training_ctx, manifest
    from webhook.rules.pods import training_job_extended_resource

    pod = manifest("pod-training", "pilot-a")
    spec = POLICY.source.spec.model_copy(update={"kubernetesVersion": "1.38"})
    on_1_38 = dataclasses.replace(POLICY, source=POLICY.source.model_copy(update={"spec": spec}))
    (f,) = training_job_extended_resource(pod, dataclasses.replace(_training_ctx(), policy=on_1_38)).findings
    assert "evicts it at once, with no checkpoint window" in f.message
    (today,) = training_job_extended_resource(pod, _training_ctx()).findings
    assert "keeps running on a device under maintenance" in today.message
