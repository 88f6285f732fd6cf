"""featureGates auto (issue 18 item 1): the cluster's own gate states, read from the API server's /metrics.

The metrics text below is copied from GET /metrics of the v1.36.2 control plane in ../shared/k8s
(started with --feature-gates AllAlpha=true,AllBeta=true), plus two lines turned off to test ``0``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from tests.fakeapi import FakeAPI
from webhook.cluster.live_view import LiveView
from webhook.commands import gates as gates_cmd
from webhook.commands import lint as lint_cmd
from webhook.gates.catalogue import GATES
from webhook.gates.cluster import ClusterGates, parse_metrics
from webhook.policy.compiled import CompiledPolicy, CompileError, compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.rules.base import Context, Finding
from webhook.rules.gates import gated_feature
from webhook.rules.view import Lookup, OfflineView

DEADLINE = 10.0
NOW = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)

METRICS = """\
# HELP kubernetes_feature_enabled [BETA] This metric records the data about the stage and enablement of a k8s feature.
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="DRAAdminAccess",stage=""} 1
kubernetes_feature_enabled{name="DRAConsumableCapacity",stage="BETA"} 1
kubernetes_feature_enabled{name="DRADeviceTaints",stage="BETA"} 0
kubernetes_feature_enabled{name="DRAListTypeAttributes",stage="ALPHA"} 1
kubernetes_feature_enabled{name="GenericWorkload",stage="ALPHA"} 1
kubernetes_feature_enabled{name="WorkloadWithJob",stage="ALPHA"} 0
# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
apiserver_request_total{code="200",verb="GET"} 12
"""

# A claim whose selector uses CEL includes(): guarded by the alpha gate DRAListTypeAttributes
# (the expression form of the dra-1.37 list-type attributes; see tests/data/gates/DRAListTypeAttributes.yaml).
LIST_CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "c", "namespace": "ml"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.example.com",
        "selectors": [{"cel": {"expression": 'device.attributes["gpu.example.com"].models.includes("a100")'}}],
    }}]}},
}
TOLERATION_CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "t", "namespace": "ml"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.example.com",
        "tolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}],
    }}]}},
}


def policy(gates: Any) -> CompiledPolicy:
    doc = {"apiVersion": "dra-migration.io/v1alpha1", "kind": "MigrationPolicy", "metadata": {"name": "auto"},
           "spec": {"featureGates": gates}}
    return compile_policy(MigrationPolicy.model_validate(doc), repr(doc).encode())


class GateView(OfflineView):
    """Offline, except for the cluster's gates: a reading, or unknown with a reason."""

    def __init__(self, reading: ClusterGates | str) -> None:
        self.reading = Lookup.unknown(reading) if isinstance(reading, str) else Lookup(reading)

    def feature_gates(self) -> Lookup[ClusterGates]:
        return self.reading


def reading() -> ClusterGates:
    enabled, stages = parse_metrics(METRICS.splitlines())
    return ClusterGates(MappingProxyType(enabled), MappingProxyType(stages))


def run(obj: dict[str, Any], pol: CompiledPolicy, view: Any) -> tuple[list[Finding], tuple[str, ...]]:
    """(findings, degraded notes) of gated-feature."""
    ctx = Context(policy=pol, kind=obj["kind"], group="resource.k8s.io", version="v1", operation="CREATE",
                  namespace="ml", phase="validate", now=NOW, cohort=None, stage="migrated", view=view)
    out = gated_feature(obj, ctx)
    return out.findings, out.degraded


# --- parsing -------------------------------------------------------------------------------------


def test_parse_metrics_reads_states_and_stages_and_skips_other_metrics() -> None:
    enabled, stages = parse_metrics(METRICS.splitlines())
    assert enabled == {"DRAAdminAccess": True, "DRAConsumableCapacity": True, "DRADeviceTaints": False,
                       "DRAListTypeAttributes": True, "GenericWorkload": True, "WorkloadWithJob": False}
    assert stages["DRAAdminAccess"] == "GA" and stages["DRAListTypeAttributes"] == "ALPHA"


@pytest.mark.parametrize("text", ["", "# nothing\napiserver_request_total 3\n", "<html>502 Bad Gateway</html>"])
def test_parse_metrics_without_samples_is_an_error_not_all_gates_off(text: str) -> None:
    with pytest.raises(ValueError, match="no kubernetes_feature_enabled samples"):
        parse_metrics(text.splitlines())


# --- the policy ------------------------------------------------------------------------------------


def test_auto_for_every_gate() -> None:
    sources = policy("auto").gate_sources
    locked = {g.name for g in GATES if (st := g.stage_in("1.37")) is not None and st.locked}
    assert sources.explicit == {} and sources.auto == {g.name for g in GATES} - locked
    assert {"DRAExtendedResource", "DynamicResourceAllocation"} <= locked  # their lock decides, not the cluster


# Issue 46 item 4: a 1.38 API server's /metrics has no DynamicResourceAllocation (removed by
# kubernetes/kubernetes#141946); DRADeviceTaints is locked on (#140256), so a reading of 0 cannot happen.
METRICS_1_38 = """\
kubernetes_feature_enabled{name="DRAConsumableCapacity",stage="BETA"} 0
kubernetes_feature_enabled{name="DRADeviceTaints",stage=""} 0
kubernetes_feature_enabled{name="DRAListTypeAttributes",stage="ALPHA"} 1
"""
DRA_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
    "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
             "containers": [{"name": "c", "image": "registry.example.com/c:1",
                             "resources": {"claims": [{"name": "gpu"}]}}]},
}
CAPACITY_CLAIM: dict[str, Any] = {
    **LIST_CLAIM,
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.example.com", "capacity": {"requests": {"memory": "8Gi"}}}}]}},
}


def test_auto_on_1_38_uses_the_cluster_except_for_removed_and_locked_gates() -> None:
    doc = {"apiVersion": "dra-migration.io/v1alpha1", "kind": "MigrationPolicy", "metadata": {"name": "auto"},
           "spec": {"kubernetesVersion": "1.38", "featureGates": "auto"}}
    pol = compile_policy(MigrationPolicy.model_validate(doc), b"1.38")
    assert "DynamicResourceAllocation" not in pol.gate_sources.auto
    assert "DRADeviceTaints" not in pol.gate_sources.auto and "DRAConsumableCapacity" in pol.gate_sources.auto
    enabled, stages = parse_metrics(METRICS_1_38.splitlines())
    view = GateView(ClusterGates(MappingProxyType(enabled), MappingProxyType(stages)))
    pod_ctx = Context(policy=pol, kind="Pod", group="", version="v1", operation="CREATE", namespace="ml",
                      phase="validate", now=NOW, cohort=None, stage="migrated", view=view)
    assert gated_feature(DRA_POD, pod_ctx).findings == []  # not "unrecognized": always served in 1.38
    assert run(TOLERATION_CLAIM, pol, view)[0] == []  # locked on: the reading cannot turn it off
    assert run(LIST_CLAIM, pol, view) == ([], ())  # alpha, on in the cluster
    (f,) = run(CAPACITY_CLAIM, pol, view)[0]
    assert "DRAConsumableCapacity" in f.message and "off in the cluster" in f.message


def test_star_auto_with_explicit_overrides_and_per_gate_auto() -> None:
    sources = policy({"*": "auto", "DRADeviceTaints": True}).gate_sources
    assert sources.explicit == {"DRADeviceTaints": True}
    assert "DRADeviceTaints" not in sources.auto and "DRAListTypeAttributes" in sources.auto
    sources = policy({"DRAListTypeAttributes": "auto", "GenericWorkload": False}).gate_sources
    assert sources.auto == {"DRAListTypeAttributes"} and sources.explicit == {"GenericWorkload": False}


@pytest.mark.parametrize(("gates", "path"), [
    ({"*": True}, ("spec", "featureGates", "*")),
    ({"NoSuchGate": "auto"}, ("spec", "featureGates", "NoSuchGate")),
])
def test_bad_auto_settings_are_errors_with_their_path(gates: dict[str, Any], path: tuple[str, ...]) -> None:
    with pytest.raises(CompileError) as exc:
        policy(gates)
    assert exc.value.path == path


# --- the rule --------------------------------------------------------------------------------------


def test_alpha_field_allowed_with_auto_when_the_cluster_has_the_gate_on() -> None:
    findings, degraded = run(LIST_CLAIM, policy("auto"), GateView(reading()))
    assert findings == [] and degraded == ()


def test_explicit_off_wins_over_the_cluster() -> None:
    findings, _ = run(LIST_CLAIM, policy({"*": "auto", "DRAListTypeAttributes": False}), GateView(reading()))
    assert [f.paths for f in findings] == [
        ("spec.devices.requests[0].exactly.selectors[0].cel.expression",)]


def test_default_on_gate_that_the_cluster_has_off_is_reported_as_off_in_the_cluster() -> None:
    findings, _ = run(TOLERATION_CLAIM, policy("auto"), GateView(reading()))
    assert len(findings) == 1 and "DRADeviceTaints" in findings[0].message
    assert "off in the cluster" in findings[0].message
    # Without auto the version default (on) applies and nothing is reported.
    assert run(TOLERATION_CLAIM, policy({}), GateView(reading()))[0] == []


def test_unknown_cluster_state_falls_back_to_defaults_and_says_so() -> None:
    findings, degraded = run(LIST_CLAIM, policy("auto"), GateView("/metrics: HTTP 403 Forbidden"))
    assert [f.rule for f in findings] == ["gated-feature"]  # alpha: off by default in 1.37
    assert len(degraded) == 1 and "HTTP 403" in degraded[0] and "1.37 defaults" in degraded[0]
    # Offline is the same, with a generic reason.
    findings, degraded = run(LIST_CLAIM, policy("auto"), OfflineView())
    assert findings and "(no cluster connection)" in degraded[0]


def test_no_degraded_note_when_no_auto_gate_decided_anything() -> None:
    clean = {**LIST_CLAIM, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.example.com"}}]}}}
    assert run(clean, policy("auto"), GateView("down"))[1] == ()
    explicit = policy({"DRAListTypeAttributes": True, "GenericWorkload": "auto"})
    assert run(LIST_CLAIM, explicit, GateView("down"))[1] == ()


# --- the live view against a fake API server -------------------------------------------------------


@pytest.fixture()
def fake() -> Iterator[FakeAPI]:
    with FakeAPI() as api:
        yield api


@pytest.fixture()
def make_view(fake: FakeAPI, tmp_path: Path) -> Iterator[Callable[..., LiveView]]:
    views: list[LiveView] = []
    kubeconfig = fake.write_kubeconfig(tmp_path)

    def make(**kwargs: Any) -> LiveView:
        view = LiveView.from_kubeconfig(kubeconfig, backoff=(0.05, 0.2), **kwargs)
        views.append(view)
        return view

    yield make
    for v in views:
        v.stop()


def poll(check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    return check()


def metrics_reads(fake: FakeAPI) -> int:
    return sum(1 for res, _, _ in fake.requests if res == "/metrics")


def test_live_view_reads_gates_in_the_background_and_keeps_the_last_reading(
    fake: FakeAPI, make_view: Callable[..., LiveView]
) -> None:
    fake.metrics_text = None  # 403: no RBAC rule for /metrics
    view = make_view(gates_interval=0.05)
    view.start()
    assert poll(lambda: metrics_reads(fake) >= 1)
    assert poll(lambda: view.status()["featureGates"]["lastError"])
    assert "403" in (view.feature_gates().degraded or "")

    fake.metrics_text = METRICS
    got = poll(lambda: view.feature_gates().value)
    assert got is not None and got.enabled["DRAListTypeAttributes"] is True
    assert "resource.k8s.io/v1" in got.served

    fake.metrics_text = None  # RBAC removed again: the last good reading stays
    seen = metrics_reads(fake)
    assert poll(lambda: metrics_reads(fake) >= seen + 2 and view.status()["featureGates"]["lastError"])
    assert view.feature_gates().value is got
    assert view.status()["featureGates"]["read"] is True


def test_gates_command_shows_policy_cluster_and_in_force(
    fake: FakeAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.metrics_text = METRICS
    pol = tmp_path / "p.yaml"
    pol.write_text("apiVersion: dra-migration.io/v1alpha1\nkind: MigrationPolicy\nmetadata: {name: p}\n"
                   "spec:\n  featureGates: {'*': auto, DRAListTypeAttributes: false}\n")
    args = argparse.Namespace(policy=str(pol), version=None, kubeconfig=fake.write_kubeconfig(tmp_path))
    assert gates_cmd.run(args) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines()}
    assert lines["GATE"][:8] == ["GATE", "STAGE", "1.37", "DEFAULT", "POLICY", "CLUSTER", "IN", "FORCE"]
    assert lines["DRAListTypeAttributes"][3:8] == ["off", "(set)", "on", "off", "(policy)"]
    assert lines["DRADeviceTaints"][3:6] == ["auto", "off", "off"] and lines["DRADeviceTaints"][6] == "(cluster)"
    assert "(not reported)" in " ".join(lines["DRADerivedAttributes"])


def test_gates_command_unreadable_cluster_is_a_clear_error(
    fake: FakeAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.metrics_text = None
    args = argparse.Namespace(policy=None, version=None, kubeconfig=fake.write_kubeconfig(tmp_path))
    assert gates_cmd.run(args) == 2
    err = capsys.readouterr().err
    assert "cannot read the cluster's feature gates from /metrics: HTTP 403" in err


def test_lint_warns_where_the_policy_contradicts_the_cluster(
    fake: FakeAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.metrics_text = METRICS
    (tmp_path / "pol").mkdir()
    (tmp_path / "pol" / "p.yaml").write_text(
        "apiVersion: dra-migration.io/v1alpha1\nkind: MigrationPolicy\nmetadata: {name: p}\nspec:\n"
        "  featureGates:\n    DRAListTypeAttributes: false\n    DRAConsumableCapacity: true\n"
        "    WorkloadWithJob: auto\n")
    args = argparse.Namespace(dir=str(tmp_path / "pol"), at=None, kubeconfig=fake.write_kubeconfig(tmp_path))
    assert lint_cmd.run(args) == 0
    out = capsys.readouterr().out
    warnings = [line for line in out.splitlines() if ": warning: " in line]
    assert len(warnings) == 1, out
    assert warnings[0].endswith(
        "p.yaml:6: warning: spec.featureGates.DRAListTypeAttributes: feature gate DRAListTypeAttributes is off "
        "in the policy but on in the cluster: the webhook reports fields the cluster accepts; set it to auto or "
        "fix the cluster")
