"""The compiled-policy reconciler (webhook.serve.reconciler) against tests/fakeapi.py: real HTTP, real server-side-apply
requests and Lease calls, a fake clock. What the API server makes of the objects:
tests/e2e/test_compiled_reconcile.py.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakeapi import FakeAPI
from tests.helpers import ROOT
from webhook.cluster import api as kube_api
from webhook.cluster.leader import LeaseElector, micro_time
from webhook.commands import load_policy
from webhook.compile import compile_admission
from webhook.policy.defaults import default_policy
from webhook.serve.reconciler import FIELD_MANAGER, KubeWriter, Reconciler, wake_time

ADMISSION = ("validatingadmissionpolicies", "validatingadmissionpolicybindings", "mutatingadmissionpolicies",
             "mutatingadmissionpolicybindings")


class Clock:
    def __init__(self, start: str) -> None:
        self.now = dt.datetime.fromisoformat(start)

    def __call__(self) -> dt.datetime:
        return self.now

    def set(self, when: str) -> None:
        self.now = dt.datetime.fromisoformat(when)


@pytest.fixture
def fake():
    with FakeAPI() as api:
        yield api


@pytest.fixture
def client(fake: FakeAPI, tmp_path: Path):
    api = kube_api.connect(fake.write_kubeconfig(tmp_path))
    with api:
        yield api


def stored(fake: FakeAPI) -> set[str]:
    return {f"{o['kind']} {o['metadata']['name']}" for r in ADMISSION for o in fake._store[r].values()}


def writes(fake: FakeAPI) -> list[tuple[str, str]]:
    return [(r, v) for r, v, _ in fake.requests if r in ADMISSION and v in ("patch", "delete")]


def names(policy: Any, at: str) -> set[str]:
    return {f"{o['kind']} {o['metadata']['name']}"
            for o in compile_admission(policy, dt.datetime.fromisoformat(at)).objects}


def always() -> bool:
    return True


def test_first_pass_applies_every_compiled_object_with_the_reconcilers_field_manager(fake, client):
    policy = load_policy(default_policy())
    clock = Clock("2026-12-05T10:00:00+00:00")
    rec = Reconciler(lambda: policy, KubeWriter(client), now=clock)
    assert rec.tick(always)
    assert stored(fake) == names(policy, "2026-12-05T10:00:00+00:00")
    assert {q.get("fieldManager") for r, v, q in fake.requests if v == "patch"} == {FIELD_MANAGER}
    assert rec.last is not None and rec.last.valid_until == dt.date(2027, 1, 15)
    before = len(writes(fake))
    clock.set("2026-12-05T10:04:59+00:00")
    assert not rec.tick(always)  # same policy, nothing due yet: no request at all
    assert len(writes(fake)) == before
    clock.set("2026-12-05T10:05:00+00:00")
    assert rec.tick(always)  # the periodic drift repair


def test_a_policy_reload_is_reconciled_at_once_and_the_stale_objects_are_pruned(fake, client, tmp_path):
    text = default_policy().read_text()
    first = load_policy(default_policy())
    changed = tmp_path / "policy.yaml"
    changed.write_text(text.replace("stage: migrated", "stage: pilot"))  # no cohort denies any more
    second = load_policy(changed)
    current = [first]
    at = "2027-06-01T09:00:00+00:00"
    rec = Reconciler(lambda: current[0], KubeWriter(client), now=Clock(at))
    rec.tick(always)
    assert stored(fake) == names(first, at)
    current[0] = second
    assert rec.tick(always)  # same clock: due because the policy changed
    gone = names(first, at) - names(second, at)
    assert any("-deny." in n for n in gone)
    assert stored(fake) == names(second, at)
    assert rec.last is not None and sorted(rec.last.pruned) == sorted(gone)


def test_the_bindings_take_the_installed_webhooks_namespaces(fake, client, caplog):
    """The reconciler reads the installed configurations before a pass (a chart release in another namespace
    excludes that one); without them it says so and uses the shipped selector."""
    policy = load_policy(default_policy())
    writer = KubeWriter(client)
    clock = Clock("2026-12-05T10:00:00+00:00")
    rec = Reconciler(lambda: policy, writer, namespaces=writer.namespaces, now=clock)
    rec.tick(always)
    assert "the bindings take the shipped namespaceSelector" in caplog.text
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                      "values": ["kube-system", "gpu-platform"]}]}
    for doc in yaml.safe_load_all((ROOT / "deploy/base/webhooks.yaml").read_text()):
        for hook in doc["webhooks"]:
            hook["namespaceSelector"] = selector
        fake.put(doc)
    clock.set("2026-12-05T10:05:00+00:00")  # the next periodic pass
    assert rec.tick(always)
    bindings = [*fake._store["validatingadmissionpolicybindings"].values(),
                *fake._store["mutatingadmissionpolicybindings"].values()]
    assert bindings and all(b["spec"]["matchResources"]["namespaceSelector"] == selector for b in bindings)


def test_the_next_pass_is_just_after_midnight_of_valid_until(fake, client):
    policy = load_policy(default_policy())
    clock = Clock("2026-11-30T23:58:00+00:00")
    rec = Reconciler(lambda: policy, KubeWriter(client), now=clock)
    rec.tick(always)
    assert not any("-warn." in n for n in stored(fake))  # the first cohort turns pilot on 2026-12-01
    assert rec.last is not None and rec.last.next_at == dt.datetime(2026, 12, 1, 0, 0, 1, tzinfo=dt.UTC)
    clock.set("2026-12-01T00:00:00+00:00")
    assert not rec.tick(always)
    clock.set("2026-12-01T00:00:01+00:00")
    assert rec.tick(always)
    assert any("-warn." in n for n in stored(fake))


def test_wake_time_is_the_period_when_no_date_comes_sooner():
    now = dt.datetime(2027, 6, 1, 12, tzinfo=dt.UTC)
    assert wake_time(None, now, 300) == now + dt.timedelta(seconds=300)
    assert wake_time(dt.date(2027, 6, 2), now, 300) == now + dt.timedelta(seconds=300)
    assert wake_time(dt.date(2027, 6, 2), now, 86400) == dt.datetime(2027, 6, 2, 0, 0, 1, tzinfo=dt.UTC)


def test_a_failed_pass_is_retried_with_backoff_and_never_raises(fake, client, caplog):
    policy = load_policy(default_policy())
    clock = Clock("2026-12-05T10:00:00+00:00")
    rec = Reconciler(lambda: policy, KubeWriter(client), now=clock)
    fake.fail("validatingadmissionpolicies")
    assert rec.tick(always)
    assert rec.failures == 1 and "retrying in 2 s" in caplog.text
    clock.set("2026-12-05T10:00:01+00:00")
    assert not rec.tick(always)
    clock.set("2026-12-05T10:00:02+00:00")
    assert rec.tick(always) and rec.failures == 2 and "retrying in 4 s" in caplog.text
    fake.heal()
    clock.set("2026-12-05T10:00:06+00:00")
    assert rec.tick(always) and rec.failures == 0
    assert stored(fake) == names(policy, "2026-12-05T10:00:06+00:00")


def test_a_replica_that_does_not_hold_the_lease_writes_nothing(fake, client):
    now = dt.datetime.now(dt.UTC)
    fake.put({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
              "metadata": {"name": "dra-webhook-compiled", "namespace": "dra-webhook"},
              "spec": {"holderIdentity": "other-replica", "leaseDurationSeconds": 15, "acquireTime": micro_time(now),
                       "renewTime": micro_time(now), "leaseTransitions": 0}})
    elector = LeaseElector(client, "dra-webhook", "dra-webhook-compiled", "this-replica")
    policy = load_policy(default_policy())
    rec = Reconciler(lambda: policy, KubeWriter(client), now=Clock("2026-12-05T10:00:00+00:00"))
    assert not elector.tick()
    assert not rec.tick(lambda: elector.leading)
    assert writes(fake) == [] and stored(fake) == set()
    fake.delete("Lease", "dra-webhook-compiled", "dra-webhook")  # the other replica is gone: we take over
    assert elector.tick()
    assert rec.tick(lambda: elector.leading)
    assert stored(fake) == names(policy, "2026-12-05T10:00:00+00:00")


def test_losing_the_lease_mid_pass_stops_the_writes():
    applied: list[str] = []

    class Writer:
        def apply(self, obj: dict[str, Any]) -> None:
            applied.append(obj["metadata"]["name"])

        def prune(self, keep: list[dict[str, Any]], labels: dict[str, str]) -> list[str]:
            raise AssertionError("no prune without the Lease")

    answers = iter([True, True, True, False])
    policy = load_policy(default_policy())
    rec = Reconciler(lambda: policy, Writer(), now=Clock("2026-12-05T10:00:00+00:00"))
    assert rec.tick(lambda: next(answers, False))
    assert len(applied) == 2


def test_serve_has_no_compiled_mode_and_forks_no_reconciler(tmp_path, capsys):
    """Issue #47 item 4: the network-facing server never writes admission policies; `dra-webhook reconcile` does."""
    import dataclasses

    from webhook.cli import main
    from webhook.serve import server

    with pytest.raises(SystemExit) as exc:
        main(["serve", "--offline", "--compiled-policies", "--dev-certs", "--cert-dir", str(tmp_path)])
    assert exc.value.code == 2 and "unrecognized arguments: --compiled-policies" in capsys.readouterr().err
    assert "compiled_policies" not in {f.name for f in dataclasses.fields(server.ServeOptions)}
    assert not hasattr(server, "reconciler_supervisor")


def test_reconcile_refuses_without_the_cluster_or_a_policy(tmp_path, capsys, monkeypatch):
    from webhook.cli import main

    for var in ("KUBERNETES_SERVICE_HOST", "KUBECONFIG"):
        monkeypatch.delenv(var, raising=False)
    assert main(["reconcile"]) == 2
    assert "reconcile needs the cluster" in capsys.readouterr().err
    assert main(["reconcile", "--kubeconfig", "k", "--policy", str(tmp_path / "none.yaml")]) == 2
    assert "none.yaml does not exist" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: dra-migration.io/v1alpha1\nkind: MigrationPolicy\nspec: {cohorts: 3}\n")
    assert main(["reconcile", "--kubeconfig", "k", "--policy", str(broken)]) == 2
    assert "policy error" in capsys.readouterr().err


def test_reconcile_runs_a_pass_and_leaves_it_on_its_lease(fake, tmp_path, monkeypatch):
    """The verb alone against the fake API server: it takes the Lease, applies the compiled objects, and the Lease it
    releases on SIGTERM carries the pass (what the webhook's gauge writer exports)."""
    import signal
    import threading

    from webhook.cli import main
    from webhook.serve import reconciler

    monkeypatch.setenv("POD_NAMESPACE", "dra-webhook")
    passes: list[reconciler.Pass] = []

    class StopAfterPass(reconciler.Reconciler):
        def tick(self, leading):  # the first successful pass ends the process, as SIGTERM would
            ran = super().tick(leading)
            if self.last is not None and not passes:
                passes.append(self.last)
                signal.raise_signal(signal.SIGTERM)
            return ran

    monkeypatch.setattr(reconciler, "Reconciler", StopAfterPass)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert threading.current_thread() is threading.main_thread()
        assert main(["reconcile", "--kubeconfig", fake.write_kubeconfig(tmp_path), "--period", "60"]) == 0
    finally:
        signal.signal(signal.SIGTERM, previous)
    policy = load_policy(default_policy())
    assert stored(fake) == names(policy, passes[0].at.isoformat())
    lease = fake._store["leases"][("dra-webhook", "dra-webhook-compiled")]
    notes = lease["metadata"]["annotations"]
    assert notes[reconciler.RECONCILED_OBJECTS] == str(len(passes[0].applied)) and \
        notes[reconciler.RECONCILED_POLICY] == policy.name
    assert dt.datetime.fromisoformat(notes[reconciler.RECONCILED_AT]) == passes[0].at.replace(microsecond=0)
    assert lease["spec"]["holderIdentity"] == ""  # released
    samples = dict((n, v) for n, _, v in reconciler.lease_samples(lease))
    assert samples == {"dra_webhook_compiled_policies_reconciled_timestamp_seconds":
                       passes[0].at.replace(microsecond=0).timestamp(),
                       "dra_webhook_compiled_policies_objects": float(len(passes[0].applied))}


def _lease(holder: str, notes: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"annotations": notes}, "spec": {"holderIdentity": holder}}


def test_lease_samples_say_the_last_pass_and_the_narrowing_only_while_held():
    from webhook.serve.reconciler import Pass, lease_annotations, lease_samples

    at = dt.datetime(2026, 12, 5, 10, 0, 0, tzinfo=dt.UTC)
    done = Pass(at, ["ValidatingAdmissionPolicy a", "ValidatingAdmissionPolicyBinding a"], [], None, at, ["stale"])
    notes = lease_annotations(done, "gpu-fleet")
    assert lease_samples(_lease("r1", notes)) == [
        ("dra_webhook_compiled_policies_reconciled_timestamp_seconds", {}, at.timestamp()),
        ("dra_webhook_compiled_policies_objects", {}, 2.0),
        ("dra_webhook_compiled_narrowing_stale", {}, 1.0)]
    assert [n for n, _, _ in lease_samples(_lease("", notes))] == [
        "dra_webhook_compiled_policies_reconciled_timestamp_seconds", "dra_webhook_compiled_policies_objects"]
    unread = lease_annotations(Pass(at, [], [], None, at, None), "gpu-fleet")
    assert "dra-migration.io/narrowing-stale" not in unread
    assert lease_annotations(Pass(at, [], [], None, at, []), "p")["dra-migration.io/narrowing-stale"] == "false"
    assert lease_samples(None) == [] and lease_samples(_lease("r1", {})) == []
    assert lease_samples(_lease("r1", {**notes, "dra-migration.io/reconciled-objects": "many"})) == []


def test_the_gauge_writer_exports_the_compiled_gauges_from_the_lease(tmp_path):
    """The serving replicas' /metrics get the compiled-mode gauges from the reconciler's Lease, read each refresh by
    the gauge writer (webhook.fleet.gauges.Exporter ``compiled``); an unreadable Lease leaves them out, the counts
    still go out."""
    from webhook.fleet.gauges import ClusterObjects, Exporter, MigrationCollector
    from webhook.serve.reconciler import Pass, lease_annotations, lease_samples

    at = dt.datetime(2026, 12, 5, 10, 0, 0, tzinfo=dt.UTC)
    lease = _lease("r1", lease_annotations(Pass(at, ["a", "b", "c"], [], None, at, []), "gpu-fleet"))
    reads: list[Any] = [lambda: lease_samples(lease)]

    class Policies:
        current = load_policy(default_policy())

    def compiled() -> list[Any]:
        return reads[0]()

    exporter = Exporter(str(tmp_path), Policies(), lambda p: ClusterObjects([], [], [], []), compiled=compiled)
    assert exporter.refresh()

    def exported() -> dict[str, float]:
        return {s.name: s.value for f in MigrationCollector(str(tmp_path)).collect() for s in f.samples
                if s.name.startswith("dra_webhook_compiled_")}

    assert exported() == {"dra_webhook_compiled_policies_reconciled_timestamp_seconds": at.timestamp(),
                          "dra_webhook_compiled_policies_objects": 3.0, "dra_webhook_compiled_narrowing_stale": 0.0}

    def forbidden() -> list[Any]:
        raise kube_api.ClusterError("reading the Lease: 403 Forbidden")

    reads[0] = forbidden
    assert exporter.refresh() and exported() == {}


def test_the_rbac_names_every_object_compile_makes_on_any_day(capsys):
    """``reconcile --print-rbac``: every verb on admission policies but list is limited to the names compile can give
    this policy's objects, create included (a server-side apply that creates is authorized as create of its name);
    and every object compiled on each schedule date of the shipped and the e2e policies has one of those names."""
    from webhook.cli import main
    from webhook.compile import object_names

    for path in (default_policy(), ROOT / "tests" / "e2e" / "data" / "compile-policy.yaml"):
        policy = load_policy(path)
        allowed = object_names(policy.name)
        days = sorted({e.from_ for c in policy.cohorts for e in c.schedule} |
                      {x.expires for x in policy.spec.exceptions if x.expires})
        seen = set()
        for day in [*days, *(d - dt.timedelta(days=1) for d in days), dt.date(2026, 12, 5)]:
            at = dt.datetime.combine(day, dt.time(12), dt.UTC)
            for obj in compile_admission(policy, at).objects:
                assert obj["metadata"]["name"] in allowed[obj["kind"]], (path, day, obj["metadata"]["name"])
                seen.add(obj["metadata"]["name"])
        assert seen
        assert main(["reconcile", "--policy", str(path), "--print-rbac"]) == 0
        role = yaml.safe_load(capsys.readouterr().out)
        for rule in role["rules"]:
            if "admissionregistration.k8s.io" in rule["apiGroups"] and set(rule["verbs"]) - {"list"}:
                assert rule.get("resourceNames"), rule
        writes = [r for r in role["rules"] if {"create", "patch", "delete", "update"} & set(r["verbs"])]
        assert {n for r in writes for n in r["resourceNames"]} == {n for v in allowed.values() for n in v}
