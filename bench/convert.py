"""How long `dra-webhook convert` takes for 1,000 manifests (issue 27: target under 5 s).

The manifests are the public corpus (tests/data/upstream, 83 files of Pods, Deployments, Jobs, JobSets, training
jobs, LWS, KubeRay, Volcano, HAMi, KAI, DRA driver samples...) copied round-robin into 1,000 files in a temporary
directory; convert runs as a user runs it, one process for the directory (``-R``), under the corpus policy with
``-n ml-train`` (a migrated cohort): the default form (a diff for the files that change), ``--claims`` (more
rewrites, each checked through admission), and ``--claims -w`` (written in place, on a fresh copy each time).
Prints the wall time per run (median of ``--repeat``), the objects read and the machine's load, since the machine
may be shared. Usage: ``python bench/convert.py [--files 1000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = ROOT / "tests" / "data" / "upstream"
POLICY = UPSTREAM / "policy.yaml"


def _corpus() -> list[Path]:
    return sorted(p for p in UPSTREAM.glob("*.yaml") if p.name not in ("policy.yaml", "cases.yaml"))


def generate(into: Path, files: int) -> int:
    """``files`` manifests from the corpus, round robin; the number of objects in them."""
    corpus = _corpus()
    objects = 0
    for i in range(files):
        src = corpus[i % len(corpus)]
        text = src.read_text()
        (into / f"{i:04d}-{src.name}").write_text(text)
        objects += sum(1 for line in text.splitlines() if line.startswith("kind:"))
    return objects


def _run(directory: Path, extra: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the convert process): on a shared machine the CPU time is the steadier one."""
    cmd = [sys.executable, "-m", "webhook", "convert", "-R", str(directory), "--policy", str(POLICY), "-n", "ml-train",
           *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="convert-bench-") as tmp:
        source = Path(tmp) / "manifests"
        source.mkdir()
        objects = generate(source, args.files)
        print(f"{args.files} manifests ({objects} objects) from {len(_corpus())} corpus files; "
              f"{os.cpu_count()} CPUs, load average before {load_before[0]:.2f}")
        for label, extra, fresh in (("diff (policy form)", [], False), ("diff, --claims", ["--claims"], False),
                                    ("-w --claims", ["--claims", "-w"], True)):
            times = []
            for _ in range(args.repeat):
                target = source
                if fresh:
                    target = Path(tmp) / "copy"
                    shutil.rmtree(target, ignore_errors=True)
                    shutil.copytree(source, target)
                times.append(_run(target, extra))
            walls, cpus = [t[0] for t in times], [t[1] for t in times]
            print(f"  {label:<20} wall median {statistics.median(walls):.2f} s (runs: "
                  f"{', '.join(f'{t:.2f}' for t in walls)}), CPU median {statistics.median(cpus):.2f} s")
    print(f"load average after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
