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


def test_the_server_forks_the_reconciler_only_in_compiled_mode(tmp_path):
    from webhook.serve.server import ServeOptions, reconciler_supervisor

    opts = {"policy": default_policy(), "cert_dir": tmp_path}
    assert reconciler_supervisor(ServeOptions(**opts, offline=False)) is None
    assert reconciler_supervisor(ServeOptions(**opts, offline=True, compiled_policies=True)) is None
    child = reconciler_supervisor(ServeOptions(**opts, offline=False, compiled_policies=True))
    assert child is not None and child.name == "compiled-policy reconciler"


def test_serve_refuses_the_compiled_mode_offline(tmp_path, capsys):
    from webhook.cli import main

    assert main(["serve", "--offline", "--compiled-policies", "--dev-certs", "--cert-dir", str(tmp_path)]) == 2
    assert "--compiled-policies needs the cluster" in capsys.readouterr().err


def test_a_repair_pass_that_applies_the_same_objects_logs_one_short_line(fake, client, caplog):
    caplog.set_level("INFO", logger="webhook.reconciler")
    policy = load_policy(default_policy())
    clock = Clock("2026-12-05T10:00:00+00:00")
    rec = Reconciler(lambda: policy, KubeWriter(client), now=clock)
    rec.tick(always)
    assert "MutatingAdmissionPolicy gpu-fleet-pods-mutate" in caplog.text
    count = len(compile_admission(policy, clock()).objects)
    caplog.clear()
    clock.set("2026-12-05T10:05:00+00:00")
    rec.tick(always)
    assert f"applied {count} objects (the same as before)" in caplog.text and "gpu-fleet-pods" not in caplog.text


def _excluded(fake: FakeAPI, name: str) -> list[str]:
    """The names the binding ``name`` leaves out beyond the shipped selector (``shared.skip_settled``)."""
    binding = fake._store["validatingadmissionpolicybindings"][("", name)]
    exprs = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    return [v for e in exprs[1:] for v in e["values"]]


def test_bindings_leave_out_the_namespaces_whose_name_settles_another_stage(fake, client, caplog):
    """Each pass lists the namespaces: one the policy's first cohort takes by name (``ml-*``, pilot) leaves the
    legacy-only Audit policy's binding, not the pilot Warn policy's; one only labels could place stays in both. A
    namespace created later is left out from the next pass on; a failed list leaves nobody out and the pass goes
    on."""
    policy = load_policy(default_policy())
    fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml-a"}},
             {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research-x"}})
    writer = KubeWriter(client)
    clock = Clock("2026-12-05T10:00:00+00:00")
    rec = Reconciler(lambda: policy, writer, namespaces=writer.namespaces, now=clock)
    assert rec.tick(always)
    assert _excluded(fake, "gpu-fleet-pods-audit.dra-migration.io") == ["ml-a"]
    assert _excluded(fake, "gpu-fleet-pods-warn.dra-migration.io") == []
    fake.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml-b"}})
    clock.set("2026-12-05T10:05:00+00:00")
    assert rec.tick(always)
    assert _excluded(fake, "gpu-fleet-pods-audit.dra-migration.io") == ["ml-a", "ml-b"]
    fake.fail("namespaces")
    clock.set("2026-12-05T10:10:00+00:00")
    assert rec.tick(always)
    assert "cannot list namespaces" in caplog.text
    assert _excluded(fake, "gpu-fleet-pods-audit.dra-migration.io") == []


def test_a_pass_names_what_is_stale_in_the_installed_narrowing(fake, client, caplog, tmp_path):
    """The installed narrowing (for the shipped policy) read every pass: silent while the policy owns its names; once
    the policy drops a legacy name, each pass warns naming it and records it (``Pass.narrowing``, the metric)."""
    from webhook.compile import narrow

    shipped = load_policy(default_policy())
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy/base/webhooks.yaml").read_text())]
    fake.put(*narrow.narrow_configs([d for d in docs if d], shipped))
    edited = tmp_path / "policy.yaml"
    edited.write_text(Path(default_policy()).read_text().replace("legacyNames: [vendor.example.com/gpu]",
                                                                 "legacyNames: []"))
    current = [shipped]
    writer = KubeWriter(client)
    clock = Clock("2026-12-05T10:00:00+00:00")
    rec = Reconciler(lambda: current[0], writer, namespaces=writer.namespaces, installed=writer.configs, now=clock)
    assert rec.tick(always) and rec.last is not None and rec.last.narrowing == []
    assert "narrowed webhook configurations are stale" not in caplog.text
    current[0] = load_policy(edited)
    assert rec.tick(always) and rec.last.narrowing is not None and len(rec.last.narrowing) == 2
    assert "keeps Pods asking for vendor.example.com/gpu from the webhook" in caplog.text


def test_a_narrowing_that_cannot_be_read_is_unknown_not_fine(caplog):
    """A failed read of the configurations leaves the pass done and the narrowing unknown (None: the metric keeps its
    last value), with a warning."""
    def broken() -> list[dict[str, Any]]:
        raise RuntimeError("connection refused")

    class Writer:
        def apply(self, obj: dict[str, Any]) -> None: ...

        def prune(self, keep: list[dict[str, Any]], labels: dict[str, str]) -> list[str]:
            return []

    rec = Reconciler(lambda: load_policy(default_policy()), Writer(), installed=broken,
                     now=Clock("2026-12-05T10:00:00+00:00"))
    assert rec.tick(always) and rec.last is not None and rec.last.narrowing is None
    assert "cannot read the webhook configurations' narrowing (connection refused)" in caplog.text
