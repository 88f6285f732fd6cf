"""Memory of one `serve` replica's processes with the cluster's devices: where the device data lives.

Starts tests/fakeapi.py's API server holding N NVIDIA-shaped devices (bench/micro.py's slices), then
`dra-webhook serve --workers 2` against it, waits until /readyz shows the devices indexed, and prints each
process's RSS and PSS (PSS shares pages among the processes: their sum is what the replica costs).
Usage: ``python bench/device_share.py [DEVICES]`` (default 20,000).
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from micro import nvidia_shaped_slice  # noqa: E402

from tests.fakeapi import FakeAPI  # noqa: E402


def _kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def main() -> int:
    devices = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    api = FakeAPI().start()
    work = Path(tempfile.mkdtemp(prefix="device-share-"))
    cls = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
           "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}
    api.put(cls, *[nvidia_shaped_slice(f"node-{n}") for n in range(devices // 8)])
    kubeconfig = api.write_kubeconfig(work)
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(work / "metrics"))
    env.pop("KUBECONFIG", None)
    proc = subprocess.Popen([sys.executable, "-m", "webhook", "serve", "--dev-certs", "--cert-dir", str(work / "certs"),
                             "--bind", "127.0.0.1:18443", "--workers", "2", "--gauge-interval", "0",
                             "--kubeconfig", kubeconfig], env=env, cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        deadline, seen = time.monotonic() + 300, None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen("https://127.0.0.1:18443/readyz", context=ctx, timeout=5) as r:  # noqa: S310
                    seen = (json.loads(r.read()).get("cluster") or {}).get("resourceslices") or {}
            except (OSError, ValueError):
                seen = None
            if seen and seen.get("devices") == devices:
                break
            time.sleep(1)
        time.sleep(3)  # the other worker's first answer too
        print(f"devices {devices}; /readyz resourceslices: {seen}")
        total = 0
        for pid in [proc.pid, *_children(proc.pid)]:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:60]
            pss = _kb(pid, "Pss")
            total += pss
            print(f"pid {pid:7d} RSS {_kb(pid, 'Rss') / 1024:7.1f} MB  PSS {pss / 1024:7.1f} MB  {cmd}")
        print(f"replica PSS {total / 1024:.1f} MB")
    finally:
        proc.terminate()
        proc.wait(30)
        api.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
