"""Live migration gauges: computed from the cluster (report rows), one exporter, bounded labels."""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.builders.gauges import NOW, scenario
from tests.e2e.waits import eventually as _eventually
from tests.fakeapi import (
    FakeAPI,
    make_policy,
    write_policy,
)
from tests.helpers import start_server
from webhook.fleet import gauges
from webhook.serve.app import StaticPolicy


def _by_name(samples: list[gauges.Sample]) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = defaultdict(dict)
    for name, labels, value in samples:
        out[name][tuple(sorted(labels.items()))] = value
    return out


def test_samples_from_a_scenario() -> None:
    got = _by_name(gauges.samples(make_policy(), NOW, scenario()))
    pods = {tuple(v for _, v in k): n for k, n in got["dra_webhook_migration_pods"].items()}
    # label order sorted: actual, cohort, intended, stage
    assert pods == {
        ("device-plugin", "pilot-teams", "device-plugin", "pilot"): 1,
        ("dra-extended-resource", "pilot-teams", "dra-extended-resource", "pilot"): 2,
        ("device-plugin", "pilot-teams", "dra-extended-resource", "pilot"): 1,  # the drifted one
        ("dra-claim", "pilot-teams", "dra-claim", "pilot"): 1,
        ("pending", "pilot-teams", "dra-extended-resource", "pilot"): 1,
        ("device-plugin", "pilot-teams", "none", "pilot"): 1,
        ("device-plugin", "none", "device-plugin", "legacy"): 1,
    }
    assert got["dra_webhook_migration_drifted_pods"] == {
        (("cohort", "none"), ("stage", "legacy")): 0, (("cohort", "pilot-teams"), ("stage", "pilot")): 1,
        (("cohort", "research"), ("stage", "pilot")): 0}
    injected = got["dra_webhook_migration_claims_injected_tolerations"]
    assert injected[(("cohort", "pilot-teams"),)] == 1 and injected[(("cohort", "research"),)] == 0
    # The two bound extended-resource Pods; the finished one is not counted (issue 141290).
    assert got["dra_webhook_migration_taint_unevictable_pods"][(("cohort", "pilot-teams"),)] == 2
    assert got["dra_webhook_migration_cohort_stage"] == {
        (("cohort", "pilot-teams"), ("stage", "pilot")): 1, (("cohort", "research"), ("stage", "pilot")): 1}
    midnight = dt.datetime(2027, 2, 1, tzinfo=dt.UTC).timestamp()
    assert got["dra_webhook_migration_next_stage_change_timestamp_seconds"] == {
        (("cohort", "pilot-teams"), ("stage", "migrated")): midnight}
    assert got["dra_webhook_migration_stage_since_timestamp_seconds"][
        (("cohort", "research"), ("stage", "pilot"))] == dt.datetime(2027, 1, 15, tzinfo=dt.UTC).timestamp()


def test_labels_are_bounded_no_object_names() -> None:
    names = {"on-dp", "on-ext-1", "on-ext-2", "drifted", "on-claim", "waiting", "nobody", "old", "done",
             "ml-a", "team-legacy", "lab", "on-claim-gpu-x7k2p", "ext-claim-abcde"}
    for name, labels, _ in gauges.samples(make_policy(), NOW, scenario()):
        assert set(labels) == set(gauges.FAMILIES[name][1])
        assert not names & set(labels.values()), (name, labels)


def _families(text: bytes) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text.decode())}


def _exposition(directory, now: float) -> bytes:
    """What /metrics shows of the migration gauges: the collector in a registry of its own."""
    registry = CollectorRegistry()
    registry.register(gauges.MigrationCollector(str(directory), clock=lambda: now))
    return generate_latest(registry)


def test_collector_drops_stale_counts_but_keeps_the_health_gauges(tmp_path) -> None:
    clock = [NOW]
    exporter = gauges.Exporter(str(tmp_path), StaticPolicy(make_policy()), scenario, interval=60,
                               clock=lambda: clock[0])
    assert exporter.refresh() is True
    fams = _families(_exposition(tmp_path, NOW.timestamp() + 10))
    assert sum(s.value for s in fams["dra_webhook_migration_pods"]) == 8
    assert fams["dra_webhook_migration_refresh_ok"][0].value == 1
    assert fams["dra_webhook_migration_gauge_writer"][0].value == 1
    later = NOW.timestamp() + 181  # staleAfter = max(3 x 60, 180) s
    fams = _families(_exposition(tmp_path, later))
    assert "dra_webhook_migration_pods" not in fams
    assert fams["dra_webhook_migration_last_success_timestamp_seconds"][0].value == NOW.timestamp()


def test_collector_keeps_family_names_help_and_labels(tmp_path) -> None:
    """The exposition is prometheus_client's, with the names, help texts and label names of FAMILIES (the compiled
    mode's from the reconciler's Lease, here given)."""
    gauges.Exporter(str(tmp_path), StaticPolicy(make_policy()), scenario, clock=lambda: NOW,
                    compiled=lambda: [(n, {}, 1.0) for n in sorted(gauges.COMPILED)]).refresh()
    text = _exposition(tmp_path, NOW.timestamp()).decode()
    for name, (help_text, _) in gauges.FAMILIES.items():
        assert f"# HELP {name} {help_text}\n# TYPE {name} gauge\n" in text
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            assert set(sample.labels) == set(gauges.FAMILIES[fam.name][1]), sample
    assert 'dra_webhook_migration_drifted_pods{cohort="pilot-teams",stage="pilot"} 1.0' in text


def test_a_replica_that_is_not_the_writer_exports_only_the_writer_gauge(tmp_path) -> None:
    leading = [True]
    exporter = gauges.Exporter(str(tmp_path), StaticPolicy(make_policy()), scenario, clock=lambda: NOW,
                               leading=lambda: leading[0])
    assert exporter.refresh() is True
    leading[0] = False  # the Lease went to another replica while this one read the cluster
    assert exporter.refresh() is False
    fams = _families(_exposition(tmp_path, NOW.timestamp()))
    assert fams == {"dra_webhook_migration_gauge_writer": fams["dra_webhook_migration_gauge_writer"]}
    assert fams["dra_webhook_migration_gauge_writer"][0].value == 0


def test_no_writer_no_migration_gauges(tmp_path) -> None:
    assert _exposition(tmp_path, NOW.timestamp()) == b""


def test_the_loop_reads_only_while_leading(tmp_path) -> None:
    reads: list[int] = []
    leading = [False]

    def read(_policy: object = None) -> gauges.ClusterObjects:
        reads.append(1)
        if len(reads) == 2:
            stop.set()
        return scenario()

    class Polls(threading.Event):  # each wait of the loop is one poll: flips leadership on the 3rd
        polls = 0

        def wait(self, timeout: float | None = None) -> bool:
            Polls.polls += 1
            if Polls.polls == 3:
                leading[0] = True
            return self.is_set()

    stop = Polls()
    exporter = gauges.Exporter(str(tmp_path), StaticPolicy(make_policy()), read, interval=0, clock=lambda: NOW,
                               leading=lambda: leading[0])
    exporter.run(stop, poll=0)
    # Rounds 1-3 not leading: no read. Rounds 4 and 5 leading (interval 0): one read each; the 2nd stops it.
    assert Polls.polls == 5 and len(reads) == 2
    assert gauges.read_snapshot(str(tmp_path))["writer"] is True


def test_failed_read_keeps_last_good_counts_and_says_so(tmp_path) -> None:
    reads = [scenario]

    def read(_policy: object = None) -> gauges.ClusterObjects:
        return reads[0]()

    def broken(_policy: object = None) -> gauges.ClusterObjects:
        raise ConnectionError("API server unreachable")

    exporter = gauges.Exporter(str(tmp_path), StaticPolicy(make_policy()), read, clock=lambda: NOW)
    assert exporter.refresh()
    reads[0] = broken
    assert exporter.refresh() is False
    fams = _families(_exposition(tmp_path, NOW.timestamp()))
    assert fams["dra_webhook_migration_refresh_ok"][0].value == 0
    assert sum(s.value for s in fams["dra_webhook_migration_pods"]) == 8
    assert "API server unreachable" in gauges.read_snapshot(str(tmp_path))["error"]


def _scrape(server) -> dict[str, list]:
    client = server.client()
    try:
        status, body = client.get("/metrics")
    finally:
        client.close()
    assert status == 200
    return _families(body)


@pytest.mark.parametrize("workers", [3])
def test_live_server_exports_each_pod_once_with_several_workers(tmp_path, workers) -> None:
    objs = scenario()
    with FakeAPI() as api:
        api.put(*objs.namespaces, *objs.device_classes, *objs.pods, *objs.claims)
        kubeconfig = api.write_kubeconfig(tmp_path)
        policy = tmp_path / "p.yaml"
        policy.write_text(Path(write_policy(tmp_path)).read_text())
        server = start_server(tmp_path, policy, "--kubeconfig", kubeconfig, "--gauge-interval", "0.5",
                              workers=workers, offline=False)
        try:
            def pods_total() -> float | None:
                fams = _scrape(server)
                samples = fams.get("dra_webhook_migration_pods")
                return sum(s.value for s in samples) if samples else None

            assert _eventually(pods_total, "the gauges") == 8
            # Every scrape (whichever worker answers) counts each Pod exactly once.
            for _ in range(6):
                fams = _scrape(server)
                assert sum(s.value for s in fams["dra_webhook_migration_pods"]) == 8
                assert sum(s.value for s in fams["dra_webhook_migration_drifted_pods"]) == 1
                unevictable = fams["dra_webhook_migration_taint_unevictable_pods"]
                assert sum(s.value for s in unevictable) == 2
            # A Pod deleted from the cluster leaves the gauges: they follow the cluster, not events.
            api.delete("Pod", "drifted", "ml-a")
            _eventually(lambda: sum(s.value for s in _scrape(server)["dra_webhook_migration_drifted_pods"]) == 0,
                        "the drifted Pod to disappear from the gauges")
            assert pods_total() == 7
            # The writer is a process of its own, beside the workers: killed, the master starts another,
            # which keeps the candidate's identity and so renews its own Lease at once.
            writer = gauges.read_snapshot(str(tmp_path / "metrics"))["pid"]
            stat = Path(f"/proc/{writer}/stat").read_text().rsplit(")", 1)[1].split()
            assert int(stat[1]) == server.proc.pid and int(stat[16]) == 10  # the master's child, nice 10
            assert int(stat[38]) == os.SCHED_IDLE  # the counting thread: preempted at once by a waking worker
            threads = [Path(t, "stat").read_text().rsplit(")", 1)[1].split()
                       for t in Path(f"/proc/{writer}/task").iterdir()]
            # The Lease's thread keeps the normal policy at nice 10: saturated workers do not cost the Lease.
            assert any(int(t[38]) == 0 and int(t[16]) == 10 for t in threads)
            assert Path(f"/proc/{writer}/oom_score_adj").read_text().strip() == "1000"  # OOM-killed first
            os.kill(writer, signal.SIGKILL)
            metrics_dir = str(tmp_path / "metrics")
            _eventually(lambda: (gauges.read_snapshot(metrics_dir) or {}).get("pid") not in (None, writer),
                        "a new gauge writer")
            assert _eventually(pods_total, "the gauges from the new writer") == 7
            assert api.count("leases", "create") == 1  # one Lease, held by the same candidate throughout
        finally:
            server.stop()
        assert server.output().count("exports the migration gauges") == 2
        assert f"gauge writer pid {writer} exited" in server.output()
