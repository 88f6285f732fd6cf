"""The kubelet's part for the chart's hook Pods, on a control plane that has none.

Helm waits for the pre-install/pre-upgrade policy-check Job (deploy/chart/templates/policy-check.yaml); the real Job
controller makes its Pod, and nothing would ever run it. ``HookKubelet`` does what a kubelet would: for each new Pod
with ``app.kubernetes.io/component=policy-check`` in the namespace it reads the ConfigMap volumes from the API
server, runs the container's command as written on this host (``tests.builders.chart.run_as_written``: the same
``dra-webhook lint`` the image runs), and writes the outcome into the Pod's status (phase, terminated state with
exit code and the output as the termination message). The Job controller then completes or fails the Job, and Helm
goes on or fails the release, as with a kubelet.
"""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.builders.chart import run_as_written
from tests.e2e.kube import Denied, Kube

SELECTOR = "app.kubernetes.io/component=policy-check"


@dataclass
class Ran:
    pod: str
    exit_code: int
    output: str


@dataclass
class HookKubelet:
    kube: Kube
    namespace: str
    ran: list[Ran] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._seen: set[str] = set()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="hook-kubelet")

    def __enter__(self) -> HookKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            try:
                for pod in self.kube.list("v1", "Pod", self.namespace, SELECTOR):
                    if pod["metadata"]["uid"] not in self._seen and (pod.get("status") or {}).get("phase") in (
                            None, "Pending"):
                        self._seen.add(pod["metadata"]["uid"])
                        self._run(pod)
            except Denied as exc:
                if exc.status != 404:  # the Pod went between list and status update
                    self.errors.append(exc)
            except Exception as exc:  # noqa: BLE001  (the test reads errors)
                self.errors.append(exc)

    def _run(self, pod: dict[str, Any]) -> None:
        spec = pod["spec"]
        files = {}
        for vol in spec.get("volumes", []):
            if "configMap" in vol:
                files[vol["name"]] = self.kube.get("v1", "ConfigMap", vol["configMap"]["name"], self.namespace)["data"]
        with tempfile.TemporaryDirectory(prefix="hook-kubelet-") as root:
            proc = run_as_written(spec, files, Path(root))
        output = (proc.stdout + proc.stderr).replace(root, "")  # paths as the container sees them
        self.ran.append(Ran(pod["metadata"]["name"], proc.returncode, output))
        (container,) = spec["containers"]
        state = {"exitCode": proc.returncode, "reason": "Completed" if proc.returncode == 0 else "Error",
                 "message": output[-4000:]}
        status = {"phase": "Succeeded" if proc.returncode == 0 else "Failed", "containerStatuses": [
            {"name": container["name"], "image": container["image"], "imageID": "", "ready": False,
             "restartCount": 0, "started": False, "state": {"terminated": state}}]}
        self.kube.call("PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}/status",
                       {"status": status}, content_type="application/merge-patch+json")
