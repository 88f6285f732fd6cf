"""The chart's hooks (issue 48 item 5): the pre-install/pre-upgrade policy check and the `helm test` Pod.

Rendered by the real helm, validated against the 1.37 schemas and the restricted Pod Security profile the namespace
enforces, and their containers' commands run as written (volumes materialised in a temporary root) here: the lint
hook refuses a policy Helm's own checks let through with lint's file:line message, and the test Pod's script gets
/readyz from a real server over TLS. tests/e2e/test_helm.py runs both through the real helm and API server.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.builders.chart import container, run_as_written, template, values_file
from tests.builders.deploy import K8S_VERSION, ROOT
from tests.helpers import Server

BROKEN = (ROOT / "policies" / "default.yaml").read_text().replace("  workloadKinds:\n", "  workloadKindz:\n", 1)


def _hooks(helm: Path, home: Path, tmp_path: Path, values: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    args = ("-f", values_file(tmp_path, values)) if values else ()
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in template(helm, home, *args, hooks=True)}


def test_hooks_validate_and_meet_the_restricted_profile(helm: Path, helm_home: Path, tmp_path: Path) -> None:
    hooks = _hooks(helm, helm_home, tmp_path)
    assert set(hooks) == {"ConfigMap/dra-webhook-policy-check", "Job/dra-webhook-policy-check",
                          "Pod/dra-webhook-test-readyz"}
    for obj in hooks.values():
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    job, test = hooks["Job/dra-webhook-policy-check"], hooks["Pod/dra-webhook-test-readyz"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert job["metadata"]["annotations"]["helm.sh/hook-output-log-policy"] == "hook-failed"  # lint's words shown
    assert hooks["ConfigMap/dra-webhook-policy-check"]["metadata"]["annotations"]["helm.sh/hook-weight"] == "-10"
    for spec in (job["spec"]["template"]["spec"], test["spec"]):
        assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["seccompProfile"]
        sc = container(spec)["securityContext"]
        assert (sc["allowPrivilegeEscalation"], sc["capabilities"], sc["readOnlyRootFilesystem"]) == (
            False, {"drop": ["ALL"]}, True)
        assert container(spec)["image"] == "dra-migration-webhook:" + container(spec)["image"].split(":")[1]


def test_policy_check_runs_lint_on_the_very_policy_the_release_mounts(helm: Path, helm_home: Path,
                                                                      tmp_path: Path) -> None:
    """A key lint refuses but Helm cannot see (spec.workloadKindz) fails the hook with file:line; the shipped
    policy passes. The hook's ConfigMap holds what the release's policy ConfigMap will hold."""
    for policy, code in ((BROKEN, 1), ((ROOT / "policies" / "default.yaml").read_text(), 0)):
        hooks = _hooks(helm, helm_home, tmp_path, {"policy": {"inline": policy}})
        cm = hooks["ConfigMap/dra-webhook-policy-check"]
        released = [o for o in template(helm, helm_home, "-f", str(tmp_path / "values.yaml"))
                    if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("dra-webhook-policy-")]
        assert [o["data"] for o in released] == [cm["data"]] == [{"default.yaml": policy}]
        spec = hooks["Job/dra-webhook-policy-check"]["spec"]["template"]["spec"]
        root = tmp_path / f"root-{code}"
        proc = run_as_written(spec, {"policy": cm["data"]}, root)
        assert proc.returncode == code, proc.stdout + proc.stderr
        if code:
            line = BROKEN.splitlines().index("  workloadKindz:") + 1
            assert f"{root}/etc/dra-webhook/policy/default.yaml:{line}: " in proc.stdout + proc.stderr
            assert "workloadKindz" in proc.stdout + proc.stderr


def test_policy_check_mounts_an_existing_configmap(helm: Path, helm_home: Path, tmp_path: Path) -> None:
    hooks = _hooks(helm, helm_home, tmp_path, {"policy": {"existingConfigMap": "my-policy"}})
    assert "ConfigMap/dra-webhook-policy-check" not in hooks
    volumes = hooks["Job/dra-webhook-policy-check"]["spec"]["template"]["spec"]["volumes"]
    assert volumes == [{"name": "policy", "configMap": {"name": "my-policy"}}]


@pytest.mark.parametrize("ready", [True, False], ids=["serving", "nothing-listening"])
def test_helm_test_pod_asks_readyz_over_tls(helm: Path, helm_home: Path, tmp_path: Path, live_server: Server,
                                            ready: bool) -> None:
    spec = _hooks(helm, helm_home, tmp_path)["Pod/dra-webhook-test-readyz"]["spec"]
    # Not serving: a port this test holds bound but never listens on, so a connection is refused for as long as
    # the check runs (no port found free and released for someone else to take).
    with socket.socket() as unserved:
        unserved.bind(("127.0.0.1", 0))
        port = live_server.port if ready else int(unserved.getsockname()[1])
        proc = run_as_written(spec, {"tls": {"ca.crt": live_server.ca.read_text()}}, tmp_path / "root",
                              env={"URL": f"https://127.0.0.1:{port}/readyz"})
    assert (proc.returncode == 0) is ready, proc.stdout + proc.stderr
    if ready:
        assert proc.stdout.startswith(f"https://127.0.0.1:{port}/readyz 200 ")

