"""`preflight` in bounded memory (issue #29): the analysis one namespace at a time gives the answer of the
analysis over every Pod at once, and the output written as it is produced (the table line by line, the JSON
with generators for its arrays) is byte for byte the output of the whole-string forms it replaces."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders.preflight import DRIVER, MAINT, TRAINING, extended_pod_and_claim, result, scenario
from tests.fakeapi import FakeAPI, exact_request, make_policy, pod, podgroup, resource_claim, write_policy
from webhook.cli import main
from webhook.commands import json_chunks, write_json
from webhook.fleet import preflight
from webhook.fleet.preflight import DeviceSelector, Preflight, Taint, claim_use, pod_projection
from webhook.fleet.preflight_output import render_text, selection_text, text_lines
from webhook.fleet.report import table


def fleet() -> tuple[list[dict], list[dict]]:
    """The outcomes of the preflight scenario (tests/builders/preflight.py), a PodGroup with two members, a Pod on the
    extended-resource path (a note), an allocated claim without a Pod (the second table) and a wide name."""
    pods, claims = scenario()
    members = [pod("ml-c", f"worker-with-a-rather-long-name-{i}", pod_group="trainers", labels=TRAINING,
                   uid=f"uid-w-{i}") for i in range(2)]
    for m in members:
        m["spec"]["resourceClaims"] = [{"name": "fabric", "resourceClaimName": "trainers-fabric"}]
    group_ref = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "trainers", "uid": "uid-pg"}
    claims.append(resource_claim("ml-c", "trainers-fabric", requests=[exact_request("fabric", DRIVER)],
                                 results=[result("gpu-3", request="fabric")], reserved_for=[group_ref]))
    ext_pod, ext_claim = extended_pod_and_claim()
    orphan = resource_claim("ml-d", "orphan", requests=[exact_request("gpu", DRIVER)], results=[result("gpu-4")])
    return [*pods, *members, ext_pod], [*claims, ext_claim, orphan]


def old_text(res: Preflight) -> str:
    """The table output as the command wrote it before it was written line by line (one string)."""
    sel = selection_text(res)  # the heading's words (no deviceSelector: per version, tests/fleet/test_preflight.py)
    out = [f"Taint {res.taint.describe()} on {sel}", ""]
    yes_no = {True: "yes", False: "no", None: "?"}
    if res.pods:
        out.append(table(["NAMESPACE", "POD", "TRAINING", "OUTCOME", "CLAIMS", "DEVICES"], [
            [p.namespace, p.name, yes_no[p.training], p.eviction.describe(), ",".join(p.claims), ",".join(p.devices)]
            for p in res.pods]))
    else:
        out.append("No Pods use the selected devices.")
    unused = [c for c in res.claims if not c.pods]
    if unused:
        out += ["", "ALLOCATED CLAIMS WITHOUT A POD"]
        out.append(table(["NAMESPACE", "CLAIM", "DEVICES"], [[c.namespace, c.name, ",".join(c.devices)]
                                                             for c in unused]))
    out += ["", res.summary()]
    out += [f"note: {n}" for n in res.notes]
    if res.blocked:
        names = ", ".join(f"{p.namespace}/{p.name}" for p in res.training_evicted_at_once)
        out.append(f"BLOCKED: training job(s) {names} would be evicted at once; give their claims a NoExecute "
                   f"toleration for {res.taint.key} with tolerationSeconds (policy trainingJobs.deviceTolerations), "
                   "or drain them first")
    return "\n".join(out) + "\n"


SELECTIONS = [
    (DeviceSelector(DRIVER), MAINT),
    (DeviceSelector(DRIVER, "node-a"), MAINT),
    (DeviceSelector(DRIVER, "node-a", "gpu-1"), MAINT),
    (DeviceSelector(), Taint(MAINT.key, effect="NoSchedule")),
    (DeviceSelector("other.example.com"), MAINT),  # nothing selected: "No Pods use the selected devices."
    (None, MAINT),
]


def both(selector: DeviceSelector | None, taint: Taint) -> tuple[Preflight, Preflight]:
    """The analysis over every claimed Pod at once, and one namespace at a time as the command runs it."""
    pods, claims = fleet()
    policy = make_policy()
    uses = [u for u in (claim_use(c, selector, taint) for c in claims) if u is not None]
    keep = pod_projection(uses, policy)
    projected = [u for u in map(keep, pods) if u is not None]
    whole = preflight.analyse(selector, taint, uses, projected, policy)
    by_ns: dict[str, list[preflight.ClaimUse]] = {}
    for u in uses:
        by_ns.setdefault(u.namespace, []).append(u)
    asked: list[str] = []

    def pods_in(ns: str) -> Iterator[preflight.PodUse]:
        asked.append(ns)
        return (p for p in projected if p.namespace == ns)

    stepwise = preflight.analyse_by_namespace(selector, taint, by_ns, pods_in, policy)
    assert asked == (sorted({u.namespace for u in uses}) if selector is not None else [])  # each once, in order
    assert by_ns == {} or selector is None  # every namespace's claims handed over (and released) once judged
    return whole, stepwise


@pytest.mark.parametrize(("selector", "taint"), SELECTIONS)
def test_one_namespace_at_a_time_gives_the_whole_answer(selector: DeviceSelector | None, taint: Taint) -> None:
    whole, stepwise = both(selector, taint)
    assert stepwise.to_json() == whole.to_json()
    assert stepwise.blocked == whole.blocked


def test_the_fleet_covers_every_part_of_the_output() -> None:
    whole, _ = both(DeviceSelector(DRIVER), MAINT)
    text = old_text(whole)
    for part in ("ALLOCATED CLAIMS WITHOUT A POD", "BLOCKED", "note: ", "worker-with-a-rather-long-name-1",
                 "evicted after 300s", "drain it by hand"):
        assert part in text


@pytest.mark.parametrize(("selector", "taint"), SELECTIONS)
def test_the_table_line_by_line_is_the_old_text(selector: DeviceSelector | None, taint: Taint) -> None:
    whole, _ = both(selector, taint)
    lines = list(text_lines(whole))
    assert all(line.endswith("\n") and "\n" not in line[:-1] for line in lines)  # one line per piece
    assert "".join(lines) == old_text(whole) == render_text(whole)


@pytest.mark.parametrize(("selector", "taint"), SELECTIONS)
def test_lazy_json_is_byte_identical(selector: DeviceSelector | None, taint: Taint,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    whole, _ = both(selector, taint)
    lazy = whole.to_json(lazy=True)
    assert not isinstance(lazy["pods"], list) and not isinstance(lazy["claims"], list)
    write_json(lazy)
    streamed = capsys.readouterr().out
    write_json(whole.to_json())  # the path before: lists, written entry by entry
    before = capsys.readouterr().out
    assert streamed == before == json.dumps(whole.to_json(), indent=2) + "\n"


def test_an_empty_generator_is_written_as_an_empty_list() -> None:
    doc = {"a": iter(()), "b": [], "c": (x for x in [1, 2])}
    assert "".join(json_chunks(doc)) == json.dumps({"a": [], "b": [], "c": [1, 2]}, indent=2)


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[tuple[FakeAPI, list[str]]]:
    pods, claims = fleet()
    with FakeAPI() as fake:
        group = podgroup("ml-c", "trainers")
        group["metadata"]["uid"] = "uid-pg"
        fake.put(*pods, *claims, group)
        yield fake, ["--kubeconfig", fake.write_kubeconfig(tmp_path), "--policy", write_policy(tmp_path)]


@pytest.mark.parametrize("output", ["table", "json"])
def test_the_command_writes_what_the_old_path_wrote(cluster: tuple[FakeAPI, list[str]], output: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    fake, common = cluster
    code = main(["preflight", "--driver", DRIVER, "--taint-value", "firmware", "-o", output, *common])
    got = capsys.readouterr().out
    whole, _ = both(DeviceSelector(DRIVER), MAINT)
    whole.notes[:0] = ["taint key example.com/maintenance taken from the policy's trainingJobs.deviceTolerations"]
    # the command's last note: what the cluster's version means for extended-resource Pods
    notes = json.loads(got)["notes"] if output == "json" else [
        line.removeprefix("note: ") for line in got.splitlines() if line.startswith("note: ")]
    assert notes[-1].startswith("extended-resource Pods are not evicted by device taints")
    whole.notes.append(notes[-1])
    assert code == 3 and whole.blocked
    expected = json.dumps({**whole.to_json(), "exitCode": 3}, indent=2) + "\n" if output == "json" else old_text(whole)
    assert got == expected
    assert fake.count("pods", "list") == 4  # one list per namespace with selected claims: ml-a, ml-b, ml-c, ml-d


def test_the_cli_starts_without_cryptography() -> None:
    """Every command builds every subparser (webhook.cli); `certs` imports cryptography only when it runs, so
    `preflight`, `report` and the others do not carry it (about 9 MB of start-up memory each)."""
    import subprocess
    import sys

    code = ("import sys; from webhook.cli import build_parser; build_parser(); "
            "import webhook.commands.preflight, webhook.cluster.api; print(sorted(m for m in sys.modules "
            "if m.split('.')[0] == 'cryptography'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
