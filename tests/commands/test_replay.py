"""`serve --record` through a real server, then `replay` of the recording under a changed policy."""

from __future__ import annotations

import copy
import json
import multiprocessing
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.helpers import ROOT, gpu_pod, patch_of, review, start_server
from webhook.serve.recording import REDACTED, Recorder, read_records, redact

LIVE_POLICY = (ROOT / "tests" / "data" / "live-policy.yaml").read_text()
SECRET = "s3cr3t-value-never-on-disk"

# Baseline: team-a is in the pilot, team-b is in no cohort (legacy). The change moves team-a to migrated
# and puts team-b in the pilot.
BASELINE = LIVE_POLICY.replace('names: ["pilot-*"]', 'names: ["team-a"]').replace(
    "name: live-test", "name: replay-test")
CHANGED = BASELINE.replace(
    '    namespaces: {names: ["team-a"]}\n    schedule:\n    - {stage: pilot, from: "2000-01-01"}\n',
    '    namespaces: {names: ["team-a"]}\n    schedule:\n    - {stage: pilot, from: "2000-01-01"}\n'
    '    - {stage: migrated, from: "2000-02-01"}\n'
    '  - name: team-b\n    namespaces: {names: ["team-b"]}\n    schedule:\n    - {stage: pilot, from: "2000-01-01"}\n',
)

assert CHANGED != BASELINE


def _objects() -> list[dict[str, Any]]:
    legacy0 = gpu_pod("legacy-0", "team-a", 2, "vendor.example.com/gpu")
    legacy1 = gpu_pod("legacy-1", "team-a", 1, "vendor.example.com/gpu")
    training = gpu_pod("train-0", "team-b", 4, labels={"workload.example.com/kind": "training"})
    web = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "team-c",
                     "annotations": {"example.com/api-token": SECRET, "example.com/owner": "web-team",
                                     "example.com/repo": f"clone https://deploy:{SECRET}@git.example.com/web.git",
                                     "kubectl.kubernetes.io/last-applied-configuration": f'{{"env": "{SECRET}"}}'}},
        "spec": {"containers": [{"name": "web", "image": "registry.example.com/web:1.0",
                                 "command": ["/bin/web", f"--token={SECRET}"], "args": ["--password", SECRET],
                                 "livenessProbe": {"httpGet": {"path": "/", "port": 80, "httpHeaders": [
                                     {"name": "Authorization", "value": f"Bearer {SECRET}"}]}},
                                 "readinessProbe": {"exec": {"command": ["check", SECRET]}},
                                 "lifecycle": {"preStop": {"exec": {"command": ["stop", SECRET]}}},
                                 "env": [{"name": "DB_PASSWORD", "value": SECRET},
                                         {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "db",
                                                                                                "key": "pw"}}}]}]},
    }
    replicas = []
    for _ in range(2):  # Pods of a ReplicaSet: no name yet, only generateName
        pod = gpu_pod("x", "team-c", 1)
        del pod["metadata"]["name"]
        pod["metadata"]["generateName"] = "infer-7d9f-"
        replicas.append(pod)
    return [legacy0, legacy1, training, web, *replicas]


def _secret() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "team-a"},
            "data": {"password": "czNjcjN0"}, "stringData": {"token": SECRET}}


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    """Run the real server with --record and send each object through /mutate then /validate."""
    tmp = tmp_path_factory.mktemp("record")
    baseline = tmp / "baseline.yaml"
    baseline.write_text(BASELINE)
    record = tmp / "reviews.jsonl"
    server = start_server(tmp, baseline, "--record", str(record))
    sent = 0
    try:
        client = server.client()
        for obj in _objects():
            mutated = client.admit("/mutate", review(obj))
            sent += 1
            patched = jsonpatch.apply_patch(obj, patch_of(mutated))
            client.admit("/validate", review(patched))
            sent += 1
        client.admit("/validate", review(_secret()))
        sent += 1
        client.close()
    finally:
        server.stop()
    return record, baseline, sent


def test_record_file_has_one_redacted_review_per_answered_request(recording: tuple[Path, Path, int]) -> None:
    record, _, sent = recording
    text = record.read_text()
    assert SECRET not in text and "czNjcjN0" not in text
    records = read_records(record)
    assert len(records) == sent and all(doc is not None for _, doc, _ in records)
    endpoints = [doc["recorded"]["endpoint"] for _, doc, _ in records]
    assert endpoints.count("/mutate") == 6 and endpoints.count("/validate") == 7
    web = next(doc["request"]["object"] for _, doc, _ in records if doc["request"]["name"] == "web-0")
    ann = web["metadata"]["annotations"]
    assert ann["example.com/api-token"] == REDACTED and ann["example.com/owner"] == "web-team"
    assert ann["kubectl.kubernetes.io/last-applied-configuration"] == REDACTED
    assert ann["example.com/repo"] == f"clone https://{REDACTED}@git.example.com/web.git"
    container = web["spec"]["containers"][0]
    env = container["env"]
    assert env[0] == {"name": "DB_PASSWORD", "value": REDACTED} and "valueFrom" in env[1]
    assert container["command"] == [REDACTED] and container["args"] == [REDACTED]
    assert container["livenessProbe"]["httpGet"] == {"path": "/", "port": 80, "httpHeaders": [
        {"name": "Authorization", "value": REDACTED}]}
    assert container["readinessProbe"]["exec"]["command"] == [REDACTED]
    assert container["lifecycle"]["preStop"]["exec"]["command"] == [REDACTED]
    secret = records[-1][1]["request"]["object"]
    assert secret["data"] == {"password": REDACTED} and secret["stringData"] == {"token": REDACTED}
    # What the rules need is kept: the record is still a review the engine can judge.
    legacy = next(doc for _, doc, _ in records if doc["request"]["name"] == "legacy-0")
    assert legacy["request"]["object"]["spec"]["containers"][0]["resources"]["limits"] == {
        "vendor.example.com/gpu": "2"}


def _replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook", "replay", *args], cwd=ROOT, capture_output=True,
                          text=True)


def test_replay_shows_newly_denied_and_new_warnings(recording: tuple[Path, Path, int], tmp_path: Path) -> None:
    record, baseline, _ = recording
    changed = tmp_path / "changed.yaml"
    changed.write_text(CHANGED)

    proc = _replay("--policy", str(changed), "--baseline", str(baseline), "-o", "json", str(record))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["requests"] == 13 and out["objects"] == 7 and out["paired"] == 6 and out["skipped"] == []
    summary = out["summary"]
    assert summary["newly denied"] == {
        "count": 2, "groups": [{"rule": "legacy-resource-name", "namespace": "team-a", "count": 2}]}
    assert summary["new warnings"] == {
        "count": 1, "groups": [{"rule": "training-job-extended-resource", "namespace": "team-b", "count": 1}]}
    assert summary["newly allowed"]["count"] == 0
    # team-b moved from legacy to pilot: its GPU Pod is annotated anew. It stays on the dra pool: no device
    # plugin advertises example.com/gpu (advertises unset: legacy names only), so the scheduler serves it
    # through DRA in both stages (issue 13 item 5).
    [patch_change] = [c for c in out["changes"] if c["category"] == "different patches"]
    assert patch_change["object"] == "Pod team-b/train-0"
    assert set(patch_change["rules"]) == {"track-rollout"}
    denied = sorted(c["object"] for c in out["changes"] if c["category"] == "newly denied")
    assert denied == ["Pod team-a/legacy-0", "Pod team-a/legacy-1"]

    text = _replay("--policy", str(changed), "--baseline", str(baseline), str(record))
    assert text.returncode == 1
    assert "newly denied: 2 objects" in text.stdout and "new warnings: 1 object" in text.stdout
    lines = [" ".join(line.split()) for line in text.stdout.splitlines()]
    assert "legacy-resource-name team-a 2" in lines
    assert "training-job-extended-resource team-b 1" in lines
    assert "2 objects would be newly denied" in lines


def test_replay_reverse_change_newly_allows(recording: tuple[Path, Path, int], tmp_path: Path) -> None:
    record, baseline, _ = recording
    changed = tmp_path / "changed.yaml"
    changed.write_text(CHANGED)
    proc = _replay("--policy", str(baseline), "--baseline", str(changed), "-o", "json", str(record))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["summary"]
    assert out["newly allowed"]["count"] == 2 and out["newly denied"]["count"] == 0


def test_replay_same_policy_changes_nothing(recording: tuple[Path, Path, int]) -> None:
    record, baseline, _ = recording
    proc = _replay("--policy", str(baseline), "--baseline", str(baseline), str(record))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nothing would be newly denied" in proc.stdout
    for category in ("newly denied", "newly allowed", "new warnings", "different patches"):
        assert f"{category}: 0 objects" in proc.stdout


def test_replay_of_a_recording_under_its_own_policy_reports_no_differences(
        recording: tuple[Path, Path, int]) -> None:
    """Issue 49 item 4: without --baseline the baseline is what the server answered (recorded.response)."""
    record, baseline, _ = recording
    proc = _replay("--policy", str(baseline), "--at", "2030-01-01", str(record))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("baseline: ")]
    assert line.startswith("baseline: the answers recorded (replay-test@") and line.endswith(": 13)")
    for category in ("newly denied", "newly allowed", "new warnings", "different patches"):
        assert f"{category}: 0 objects" in proc.stdout
    proc = _replay("--policy", str(baseline), "--at", "2030-01-01", "-o", "json", str(record))
    out = json.loads(proc.stdout)
    assert out["baseline"] == "recorded" and out["baselineSource"] == "recorded answers"
    assert list(out["recordedPolicies"].values()) == [13] and out["changes"] == []
    assert out["objects"] == 7 and out["paired"] == 6


def test_replay_against_the_recorded_answers_finds_what_the_change_changes(
        recording: tuple[Path, Path, int], tmp_path: Path) -> None:
    record, _, _ = recording
    changed = tmp_path / "changed.yaml"
    changed.write_text(CHANGED)
    proc = _replay("--policy", str(changed), "--at", "2030-01-01", "-o", "json", str(record))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["summary"]["newly denied"]["groups"] == [
        {"rule": "legacy-resource-name", "namespace": "team-a", "count": 2}]
    assert out["summary"]["new warnings"]["groups"] == [
        {"rule": "training-job-extended-resource", "namespace": "team-b", "count": 1}]
    [patch_change] = [c for c in out["changes"] if c["category"] == "different patches"]
    assert patch_change["object"] == "Pod team-b/train-0" and patch_change["rules"] == ["track-rollout"]


def test_replay_of_records_without_answers_asks_for_a_baseline(recording: tuple[Path, Path, int],
                                                               tmp_path: Path) -> None:
    record, baseline, _ = recording
    old = tmp_path / "old.jsonl"
    lines = []
    for _, doc, _ in read_records(record):
        assert doc is not None and "response" in doc["recorded"] and doc["recorded"]["policy"]
        doc["recorded"] = {"endpoint": doc["recorded"]["endpoint"]}
        lines.append(json.dumps(doc))
    old.write_text("\n".join(lines) + "\n")
    proc = _replay("--policy", str(baseline), str(old))
    assert proc.returncode == 2 and "holds the answer the server sent" in proc.stderr
    assert "pass --baseline POLICY" in proc.stderr and "Traceback" not in proc.stderr
    proc = _replay("--policy", str(baseline), "--baseline", str(baseline), str(old))
    assert proc.returncode == 0 and "baseline: replay-test@" in proc.stdout and "--baseline)" in proc.stdout


def test_replay_input_errors(tmp_path: Path, recording: tuple[Path, Path, int]) -> None:
    record, baseline, _ = recording
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n{\"kind\": \"Pod\"}\n")
    proc = _replay("--policy", str(baseline), str(bad))
    assert proc.returncode == 2 and f"{bad}:1: not JSON" in proc.stderr and f"{bad}:2:" in proc.stderr
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(record.read_text() + "garbage\n")
    proc = _replay("--policy", str(baseline), "--baseline", str(baseline), str(mixed))
    assert proc.returncode == 0 and f"skipped {mixed}:14: not JSON" in proc.stdout
    broken = tmp_path / "broken.yaml"
    broken.write_text(BASELINE.replace("maxPerPod: 4", "maxPerPod: four"))
    proc = _replay("--policy", str(broken), str(record))
    assert proc.returncode == 2 and "new policy error" in proc.stderr and "maxPerPod" in proc.stderr


# ------------------------------------------------------------------------------------------ Recorder


def _body(i: int, pad: int = 200) -> bytes:
    obj = gpu_pod(f"p-{i}", "team-a")
    obj["metadata"]["labels"] = {"pad": "x" * pad}
    return json.dumps(review(obj, uid=f"uid-{i}")).encode()


def _write_many(path: str, max_bytes: int, start: int, count: int, threads: int) -> None:
    recorder = Recorder(path, max_bytes=max_bytes)

    def work(offset: int) -> None:
        for i in range(start + offset, start + count, threads):
            recorder(_body(i), "/mutate")

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    recorder.close()


def _uids(*paths: Path) -> list[str]:
    out = []
    for path in paths:
        if path.exists():
            for _, doc, error in read_records(path):
                assert doc is not None, error  # no torn or interleaved line
                out.append(doc["request"]["uid"])
    return out


def _processes(path: Path, max_bytes: int, procs: int, per_proc: int, threads: int) -> None:
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_write_many, args=(str(path), max_bytes, p * per_proc, per_proc, threads))
               for p in range(procs)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
        assert w.exitcode == 0


def test_recorder_appends_whole_lines_from_many_processes_and_threads(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _processes(path, 1 << 30, procs=4, per_proc=60, threads=4)
    uids = _uids(path)
    assert sorted(uids) == sorted(f"uid-{i}" for i in range(240))


def test_recorder_rotates_and_stays_bounded(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    line = len(_body(0)) + 80  # about one record with its `recorded` stamp
    max_bytes = 20 * line
    _processes(path, max_bytes, procs=3, per_proc=80, threads=3)
    backup = tmp_path / "r.jsonl.1"
    assert backup.exists()
    # FILE stays within the limit; FILE.1 may have taken the few lines in flight during a rotation.
    assert path.stat().st_size <= max_bytes
    assert backup.stat().st_size <= max_bytes + 3 * 3 * line
    uids = _uids(backup, path)
    assert len(uids) == len(set(uids)) and 20 <= len(uids) < 240
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl", "r.jsonl.1"]


def test_recorder_follows_a_rotation_done_elsewhere(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    a, b = Recorder(path, max_bytes=4096), Recorder(path, max_bytes=4096)
    a(_body(1, pad=10), "/mutate")
    b(_body(2, pad=10), "/mutate")
    for i in range(3, 12):
        a(_body(i, pad=10), "/mutate")  # rotates at least once
    b(_body(99, pad=10), "/validate")  # b's file was renamed under it: b must write to the new FILE
    assert "uid-99" in _uids(path)
    a.close()
    b.close()


def test_recorder_never_raises(tmp_path: Path) -> None:
    blocked = tmp_path / "dir-not-file"
    blocked.mkdir()
    recorder = Recorder(blocked, max_bytes=4096)
    recorder(_body(1), "/mutate")  # cannot open a directory for appending: logged, dropped
    assert recorder.dropped == 1
    recorder(b"not json at all")  # not a review: ignored
    big = Recorder(tmp_path / "small.jsonl", max_bytes=1024)
    big(_body(2, pad=5000))
    assert big.dropped == 1 and not (tmp_path / "small.jsonl").exists()


def test_redact_leaves_rule_inputs_alone() -> None:
    pod = gpu_pod("p", "team-a")
    pod["spec"]["containers"][0]["env"] = [{"name": "A", "value": "x"}]
    pod["metadata"]["annotations"] = {"vault.example.com/secret-path": "kv/x", "team": "a"}
    doc = review(copy.deepcopy(pod))
    doc["request"]["userInfo"]["extra"] = {"authentication.kubernetes.io/credential-id": ["JTI=abc"]}
    out = redact(doc)["request"]
    assert out["object"]["spec"]["containers"][0]["env"] == [{"name": "A", "value": REDACTED}]
    assert out["object"]["metadata"]["annotations"] == {"vault.example.com/secret-path": REDACTED, "team": "a"}
    assert out["object"]["spec"]["containers"][0]["resources"] == pod["spec"]["containers"][0]["resources"]
    assert out["userInfo"]["extra"] == {"authentication.kubernetes.io/credential-id": [REDACTED]}
    assert out["userInfo"]["username"] == "alice"


@pytest.mark.parametrize("chain", [True, False], ids=["mutate", "validate"])
def test_a_redacted_review_is_judged_as_the_original(tmp_path: Path, chain: bool) -> None:
    """What the recorder strips (env values, command, args, header values, URL credentials) no rule reads."""
    import datetime as dt

    from webhook.admission.review import parse
    from webhook.commands import load_policy
    from webhook.commands.replay import judge
    from webhook.serve.recording import record_line

    (tmp_path / "p.yaml").write_text(CHANGED)
    policy = load_policy(tmp_path / "p.yaml")
    now = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
    for obj in [*_objects(), _secret()]:
        original = json.dumps(review(obj)).encode()
        recorded = record_line(original, "/mutate")
        assert recorded is not None and SECRET not in recorded.decode()
        base, red = judge(parse(original), policy, chain, now), judge(parse(recorded), policy, chain, now)
        assert (red.allowed, red.denied_by, red.warned) == (base.allowed, base.denied_by, base.warned), obj
        assert [a.patch for a in red.answers] == [a.patch for a in base.answers], obj


def test_the_recorded_answer_is_redacted_as_the_request_is() -> None:
    """A patch that adds a container would carry its env values: the recorded answer strips them too."""
    from webhook.serve.recording import record_line

    ops = [{"op": "add", "path": "/spec/containers/-", "value": {
        "name": "side", "env": [{"name": "TOKEN", "value": SECRET}], "command": ["run", SECRET]}}]
    response = {"uid": "u", "allowed": True, "patchType": "JSONPatch", "patch": ops}
    line = record_line(review(gpu_pod("p", "team-a")), "/mutate", response=response, policy="p@1")
    assert line is not None and SECRET not in line.decode()
    recorded = json.loads(line)["recorded"]
    assert recorded["policy"] == "p@1"
    assert recorded["response"]["patch"][0]["value"]["env"] == [{"name": "TOKEN", "value": REDACTED}]
    assert ops[0]["value"]["env"][0]["value"] == SECRET  # the answer sent is not changed
