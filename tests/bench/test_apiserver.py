"""bench/apiserver.py's set-up "compiled" (issue 28 item 5): how its probes tell the compiled objects apart, when a
set-up counts as in effect, and the target line (GPU Pods add <= 1.2x the policy pair; plain Pods add nothing)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "bench_apiserver", Path(__file__).resolve().parents[2] / "bench" / "apiserver.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_apiserver"] = bench
_spec.loader.exec_module(bench)

VAP = "gpu-fleet-pods-warn.dra-migration.io"
COMPILED = [{"kind": "ValidatingAdmissionPolicy", "metadata": {"name": VAP}},
            {"kind": "MutatingAdmissionPolicy", "metadata": {"name": "gpu-fleet-pods-mutate.dra-migration.io"}}]
TRACKED = {"dra-migration.io/path": "dra-extended-resource", "dra-migration.io/policy": "gpu-fleet@7bf9ee862f30"}
WARNING = f"299 - \"Validation failed for ValidatingAdmissionPolicy '{VAP}' with binding '{VAP}': legacy\""
WEBHOOKS = {"workloads.mutate.dra-migration.io", "workloads.validate.dra-migration.io"}


def test_the_compiled_objects_act_when_their_warning_and_annotations_show():
    assert bench.compiled_seen(COMPILED, set(), TRACKED, WARNING) == {"compiled": True, "compiled-any": True}


def test_the_webhooks_annotations_are_not_taken_for_the_compiled_ones():
    seen = bench.compiled_seen(COMPILED, WEBHOOKS, TRACKED, "299 - \"legacy-resource-name (pilot): ...\"")
    assert seen == {"compiled": False, "compiled-any": False}


def test_a_lingering_compiled_mutation_alone_counts_as_a_trace():
    assert bench.compiled_seen(COMPILED, set(), TRACKED, "") == {"compiled": False, "compiled-any": True}


def test_the_hand_written_pair_is_not_taken_for_the_compiled_objects():
    pair = {"dra-migration.io/path": "dra-extended-resource", "dra-migration.io/policy": "bench"}
    denial = "ValidatingAdmissionPolicy 'bench-dra-migration' with binding 'bench-dra-migration' denied request"
    assert bench.compiled_seen(COMPILED, set(), pair, denial) == {"compiled": False, "compiled-any": False}


def _bench() -> object:
    return bench.Bench(None, [], [], [], [], dict, COMPILED)


PARTS_OFF = {p: False for p in bench.PARTS} | {f"{p}-any": False for p in bench.PARTS}


@pytest.mark.parametrize(("config", "probe", "effective"), [
    ("compiled", {"compiled": True, "compiled-any": True, "narrowed": True, "narrowed-any": True}, True),
    ("compiled", {"compiled": True, "compiled-any": True, "narrowed-any": True}, False),  # sent the GPU Pod too
    ("compiled", {"compiled": True, "compiled-any": True}, False),
    ("compiled", {"compiled": True, "compiled-any": True, "narrowed": True, "narrowed-any": True,
                  "webhooks-any": True}, False),
    ("compiled-objects", {"compiled": True, "compiled-any": True, "webhooks-any": True}, False),
    ("compiled-objects", {"compiled": True, "compiled-any": True, "narrowed-any": True}, False),
    ("compiled-objects", {"compiled": True, "compiled-any": True}, True),
    ("webhooks", {"webhooks": True, "webhooks-any": True, "compiled-any": True}, False),
    ("none", {}, True),
])
def test_a_set_up_is_in_effect_when_all_its_parts_act_and_no_other_part_does(config, probe, effective):
    b = _bench()
    b._probe = lambda: PARTS_OFF | probe
    if effective:
        b._wait_effective(config, timeout=0.5)
    else:
        with pytest.raises(RuntimeError, match="not in effect"):
            b._wait_effective(config, timeout=0.5)


def _rounds(b: object, config: str, kind: str, values: list[float]) -> None:
    for mode in ("sequential", f"{bench.CONCURRENCY}-way"):
        b.round_medians[(config, mode, kind)] = values


@pytest.mark.parametrize(("compiled_gpu", "verdict"), [(21.5, "met"), (23.0, "**not met**")])
def test_gpu_pods_may_add_up_to_1_2x_what_the_policy_pair_adds(compiled_gpu, verdict):
    b = _bench()
    for kind in bench.KINDS:
        _rounds(b, "none", kind, [10.0, 10.0, 10.0])
        _rounds(b, "compiled-objects", kind, [30.0, 30.0, 30.0])
    _rounds(b, "policies", "gpu", [20.0, 20.0, 20.0])  # the pair adds 10 ms; compiled 11.5 or 13
    _rounds(b, "compiled", "gpu", [compiled_gpu] * 3)
    _rounds(b, "compiled", "plain", [9.0, 10.0, 11.0])
    lines = bench.compiled_targets(b)
    gpu = [line for line in lines if line.startswith("| GPU Pods")]
    plain = [line for line in lines if line.startswith("| plain Pods")]
    assert len(gpu) == 2 and all(line.endswith(f"| {verdict} |") for line in gpu)
    assert len(plain) == 2 and all(line.endswith("| met |") for line in plain)


def test_plain_pods_that_add_time_in_every_round_miss_the_target():
    b = _bench()
    for kind in bench.KINDS:
        _rounds(b, "none", kind, [10.0, 10.0, 10.0])
        _rounds(b, "policies", kind, [20.0, 20.0, 20.0])
        _rounds(b, "compiled-objects", kind, [30.0, 30.0, 30.0])
        _rounds(b, "compiled", kind, [12.0, 13.0, 12.5])
    plain = [line for line in bench.compiled_targets(b) if line.startswith("| plain Pods")]
    assert plain and all(line.endswith("| **not met** |") for line in plain)


def test_every_set_up_is_made_of_known_parts():
    assert set().union(*bench.SETUPS.values()) == set(bench.PARTS)
    assert bench.SETUPS["compiled"] == {"compiled", "narrowed"}  # issue 28 item 5: objects + narrowed webhooks
    assert bench.SETUPS["compiled-objects"] == {"compiled"}
