"""bench/scale.py's results (pure): sizes of separate runs merged into one table with per-1k-Pods slopes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "bench_scale", Path(__file__).resolve().parents[2] / "bench" / "scale.py")
scale = importlib.util.module_from_spec(_spec)
sys.modules["bench_scale"] = scale
_spec.loader.exec_module(scale)

META = {"when": "2026-12-05 07:40 UTC", "cores": "2", "memory": "24 GiB", "platform": "Linux 6", "code": "abc1234",
        "k8s": "kube-apiserver v1.36.2", "load": "1.00 before / 2.00 after"}


def _size(pods: int, report_mb: float, serve_mb: float) -> object:
    r = scale.SizeResult(pods, 10.0, 100.0, 9200.0, {"pods": pods, "device_pods": pods // 2})
    r.runs["report"] = scale.Run(12.5, report_mb, 0, 1000)
    r.serve = scale.ServeRun({11: {"name": "master 11", "hwm_mb": serve_mb}}, serve_mb, serve_mb - 10,
                             [(100.0, 130.0)], [(90.0, 4.0), (110.0, 6.0)], 0, pods / 2)
    return r


def test_an_earlier_runs_raw_file_merges_into_one_table(tmp_path: Path) -> None:
    small = tmp_path / "small.json"
    small.write_text(json.dumps(scale.as_json([_size(5000, 100.0, 300.0)], META)))
    (back,), meta = scale.merged([small])
    assert meta == META and back.run == scale.run_label(META)
    assert back.serve.split_latency() == ([6.0], [4.0])  # the admission samples survive the round trip
    big = _size(100000, 119.0, 338.0)
    big.run = "run of 2026-12-05 08:20 UTC, code abc1234, load average 3.00 before / 4.00 after"
    text = scale.render(sorted([big, back], key=lambda r: r.pods), META)
    assert "Sizes measured by 2 runs" in text and "08:20 UTC" in text and "07:40 UTC" in text
    report = next(line for line in text.splitlines() if line.startswith("| `report`"))
    assert "12.5 s / 100 MB | 12.5 s / 119 MB | 0.20 |" in report  # (119 - 100) MB over 95,000 Pods, per 1,000
    serve = next(line for line in text.splitlines() if "sum of the processes' peak RSS" in line)
    assert serve.endswith("| 300 MB | 338 MB | 0.40 |")


def test_runs_before_placement_and_pacing_are_labelled_unpinned_and_unpaced() -> None:
    label = scale.run_label(META)
    assert "unpinned (every process on every CPU)" in label and "--gauge-read-share 1 (before pacing" in label
    pinned = scale.run_label({**META, "placement": scale.Placement(True).describe(), "read_share": "0.5"})
    assert "--gauge-read-share 0.5" in pinned


def test_placement_pins_only_when_asked() -> None:
    argv = ["/bin/true", "x"]
    assert scale.Placement(False).wrap(argv) == argv
    assert scale.parse_args(["--no-pin"]).pin is False and scale.parse_args([]).pin is True
    place = scale.Placement(True)
    if place.enabled:  # 2+ CPUs: the command is exec'd by a wrapper that first moves it to CPU 0
        wrapped = place.wrap(argv)
        assert wrapped[-2:] == argv and wrapped[wrapped.index("-c") + 2] == "0"
        assert "sched_setaffinity" in wrapped[wrapped.index("-c") + 1]


def test_the_first_refresh_is_told_from_the_recounts_and_the_writer_cpu_is_per_recount(tmp_path: Path) -> None:
    run = scale.ServeRun({}, 0.0, 0.0, [(100.0, 130.0), (145.0, 146.0), (161.0, 162.0)],
                         [(90.0, 4.0), (110.0, 9.0), (145.5, 5.0), (150.0, 3.0), (161.2, 7.0)], 0, 10.0,
                         writer_cpu=[20.0, 20.5, 20.9])
    assert run.split_latency() == ([9.0, 5.0, 7.0], [4.0, 3.0])
    assert run.split_first() == ([9.0], [5.0, 7.0])
    assert abs(run.cpu_per_later_refresh() - 0.45) < 1e-9
    r = scale.SizeResult(1000, 1.0, 1.0, 9000.0, {"device_pods": 10})
    r.serve = run
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(scale.as_json([r], META)))
    (back,), _ = scale.merged([raw])
    assert back.serve.writer_cpu == [20.0, 20.5, 20.9]
    line = next(x for x in scale.serve_lines(back) if "during the first" in x)
    assert "n=1 median 9.0" in line and "n=2 median" in line and "0.450 s" in line
