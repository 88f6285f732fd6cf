"""The container image: the Dockerfile and deploy/image/build.py produce the same image, and the image works.

The static tests compare the Dockerfile's final stage with build.py's declared configuration. The others
(skipped without mmdebstrap/umoci/root, failing under CI=true: tests/image_rootfs.py) build the image (or
take it from build.py's cache), unpack it with umoci and run its entrypoint in the unpacked root filesystem
as uid 65532 with a read-only root, the certificates and policy at the Deployment's paths, asking /readyz
and an AdmissionReview over TLS.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import image_rootfs
from tests.helpers import ROOT, Client, apply_and_validate, gpu_pod, listening_socket, make_certs, review

BUILD = image_rootfs.build_module()
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


# ------------------------------------------------------------------------------------------ the Dockerfile


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of every instruction, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        keyword, _, args = pending.partition(" ")
        out.append((keyword.upper(), args.strip()))
        pending = ""
    return out


def _stages(instructions: list[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """Stage name (``final`` for the last) -> its instructions after FROM; ``args`` for the global ARGs."""
    stages: dict[str, list[tuple[str, str]]] = {"args": []}
    current = "args"
    for keyword, args in instructions:
        if keyword == "FROM":
            parts = args.split()
            current = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else "final"
            stages[current] = [("FROM", parts[0])]
        else:
            stages[current].append((keyword, args))
    return stages


def _pairs(args: str, variables: dict[str, str]) -> dict[str, str]:
    """``K=V K2="V 2"`` of ENV, LABEL and ARG, with ``${NAME}`` expanded from ``variables``."""
    out = {}
    for word in shlex.split(args):
        key, _, value = word.partition("=")
        out[key] = re.sub(r"\$\{(\w+)\}", lambda m: variables[m.group(1)], value)
    return out


@pytest.fixture(scope="module")
def dockerfile() -> dict[str, list[tuple[str, str]]]:
    return _stages(_instructions((ROOT / "Dockerfile").read_text()))


def _one(stage: list[tuple[str, str]], keyword: str) -> str:
    values = [args for kw, args in stage if kw == keyword]
    assert len(values) == 1, f"expected one {keyword} in the final stage, found {values}"
    return values[0]


def test_dockerfile_declares_what_build_py_declares(dockerfile: dict[str, list[tuple[str, str]]]) -> None:
    final = dockerfile["final"]
    variables: dict[str, str] = {}
    declared = BUILD.config(VERSION)
    assert _one(final, "USER") == declared["user"]
    assert json.loads(_one(final, "ENTRYPOINT")) == declared["entrypoint"]
    assert json.loads(_one(final, "CMD")) == declared["cmd"]
    assert _pairs(_one(final, "ENV"), variables) == declared["env"]
    assert _pairs(_one(final, "LABEL"), variables) == declared["labels"]
    assert _one(final, "WORKDIR") == declared["workdir"]
    assert [f"{port}/tcp" for port in _one(final, "EXPOSE").split()] == declared["exposed_ports"]
    assert declared["labels"]["org.opencontainers.image.version"] == VERSION
    assert declared["labels"]["org.opencontainers.image.licenses"] == "Apache-2.0"


def test_dockerfile_installs_the_same_debian_python_and_paths(dockerfile: dict[str, list[tuple[str, str]]]) -> None:
    global_args = _pairs(" ".join(args for _, args in dockerfile["args"]), {})
    assert global_args["DEBIAN_IMAGE"] == f"debian:{BUILD.SUITE}-slim", "same Debian release as build.py"
    base = dockerfile["base"]
    assert base[0] == ("FROM", "${DEBIAN_IMAGE}")
    install = _one(base, "RUN")
    listed = re.search(r"apt-get install -y --no-install-recommends ([\w .+-]+?) &&", install)
    assert listed, install
    assert sorted(listed.group(1).split()) == sorted(BUILD.PACKAGES), "same Debian packages as build.py"
    builder = dockerfile["builder"]
    assert builder[0] == ("FROM", "base") and dockerfile["final"][0] == ("FROM", "base")
    runs = " ".join(args for kw, args in builder if kw == "RUN")
    assert f"/usr/bin/python3 -m venv {BUILD.VENV}" in runs, "the venv on Debian's python3, at build.py's path"
    assert "pip uninstall --yes pip setuptools" in runs, "neither image carries pip or setuptools"
    copies = [args for kw, args in dockerfile["final"] if kw == "COPY"]
    assert f"--from=builder {BUILD.VENV} {BUILD.VENV}" in copies
    assert f"policies/default.yaml {BUILD.POLICY_DIR}/default.yaml" in copies
    made = _one(dockerfile["final"], "RUN")
    for directory in (BUILD.METRICS_DIR, BUILD.TLS_DIR):
        assert directory in made, directory
    assert f"chown {BUILD.USER} {BUILD.METRICS_DIR}" in made


def test_deployment_mounts_a_volume_on_every_writable_path() -> None:
    """Read-only root: the paths the server writes (tmp, multiprocess metrics) are the Deployment's volumes."""
    deployment = yaml.safe_load((ROOT / "deploy" / "base" / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    for writable in ("/tmp", BUILD.config(VERSION)["env"]["PROMETHEUS_MULTIPROC_DIR"]):
        assert "emptyDir" in volumes[mounts[writable]["name"]], writable
    assert env["HOME"] == env["TMPDIR"] == "/tmp"
    for read_only in (BUILD.POLICY_DIR, BUILD.TLS_DIR):
        assert mounts[read_only]["readOnly"] is True, read_only
    assert container["image"].rsplit(":", 1)[1] == VERSION, "the base's image tag follows pyproject.toml"
    assert str(pod["securityContext"]["runAsUser"]) + ":" + str(pod["securityContext"]["runAsGroup"]) == BUILD.USER


# ------------------------------------------------------------------------------------------ the built image


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    image_rootfs.require()
    work = tmp_path_factory.mktemp("image")
    archive = image_rootfs.build(work)
    return image_rootfs.unpack(archive, work / "unpacked")


def test_built_image_has_the_declared_configuration(image: tuple[Path, dict[str, Any]]) -> None:
    bundle, config = image
    declared = BUILD.config(VERSION)
    c = config["config"]
    assert c["User"] == declared["user"]
    assert c["Entrypoint"] == declared["entrypoint"] and c["Cmd"] == declared["cmd"]
    assert dict(item.split("=", 1) for item in c["Env"]) == declared["env"]
    assert c["Labels"] == declared["labels"]
    assert sorted(c["ExposedPorts"]) == declared["exposed_ports"]
    assert c["WorkingDir"] == declared["workdir"]
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    rootfs = bundle / "rootfs"
    venv = image_rootfs.inside(rootfs, BUILD.VENV)
    assert (venv / "bin" / "python3").readlink() == Path("/usr/bin/python3"), "the venv on Debian's python3"
    assert not list(venv.glob("lib/python3*/site-packages/pip")), "no pip in the image"
    assert not list(venv.glob("lib/python3*/site-packages/setuptools")), "no setuptools in the image"
    assert list(venv.glob("lib/python3.11/site-packages/webhook/cli.py")), "Python 3.11, as the Dockerfile's"
    # The layers carry mtime 0: only hash-checked bytecode stays valid (else every start recompiles in memory).
    site = next(venv.glob("lib/python3.11/site-packages"))
    for pyc in (site / "webhook" / "__pycache__" / "cli.cpython-311.pyc",
                next((site / "kubernetes" / "client" / "__pycache__").glob("api_client.cpython-311.pyc"))):
        flags = int.from_bytes(pyc.read_bytes()[4:8], "little")
        assert flags == 0b11, f"{pyc.relative_to(rootfs)}: not checked-hash bytecode (flags {flags})"
    policy = image_rootfs.inside(rootfs, BUILD.POLICY_DIR) / "default.yaml"
    assert policy.read_bytes() == (ROOT / "policies" / "default.yaml").read_bytes()
    metrics = image_rootfs.inside(rootfs, BUILD.METRICS_DIR)
    assert f"{metrics.stat().st_uid}:{metrics.stat().st_gid}" == BUILD.USER
    assert not [p for p in (rootfs / "dev").iterdir()], "no device nodes in the layer (the runtime's /dev)"


def _deployment_args(bind: str) -> list[str]:
    """The Deployment's container args, with the listening address replaced (a handed-over socket)."""
    deployment = yaml.safe_load((ROOT / "deploy" / "base" / "deployment.yaml").read_text())
    args = list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    args[args.index("--bind") + 1] = bind
    return args


def _wait_ready(client: Client, proc: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"the image's entrypoint exited with {proc.returncode}:\n{log.read_text()}")
        try:
            status, body = client.get("/readyz")
            if status == 200:
                return dict(json.loads(body))
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"not ready in 60 s:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def test_image_entrypoint_serves_readyz_and_admission_over_tls(image: tuple[Path, dict[str, Any]],
                                                               tmp_path: Path) -> None:
    bundle, config = image
    certs = image_rootfs.readable_certs(make_certs(tmp_path / "generated"), tmp_path / "tls", gid=65532)
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "default.yaml").write_bytes((ROOT / "tests" / "data" / "live-policy.yaml").read_bytes())
    listener = listening_socket()
    port = listener.getsockname()[1]
    argv = image_rootfs.run_argv(
        bundle / "rootfs", [*config["config"]["Entrypoint"], *_deployment_args(f"fd://{listener.fileno()}")],
        user=config["config"]["User"], read_only={BUILD.TLS_DIR: certs, BUILD.POLICY_DIR: policy},
        empty_dirs=("/tmp", BUILD.METRICS_DIR))
    log = tmp_path / "server.log"
    env = image_rootfs.image_env(config, HOME="/tmp", TMPDIR="/tmp", POD_NAMESPACE="dra-webhook",
                                 POD_NAME="dra-webhook-image-test")
    with listener, log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, pass_fds=[listener.fileno()],
                                start_new_session=True)
    client = Client(port, certs / "ca.crt")
    try:
        ready = _wait_ready(client, proc, log)
        assert ready["ready"] is True and ready["policy"].startswith("live-test@"), ready
        pod = gpu_pod(namespace="pilot-a")
        answer = client.admit("/mutate", review(pod, namespace="pilot-a"))
        assert answer["response"]["allowed"] is True
        patched = apply_and_validate(pod, answer)
        annotations = patched["metadata"]["annotations"]
        assert annotations["dra-migration.io/path"] == "dra-extended-resource", annotations
        assert annotations["dra-migration.io/policy"].startswith("live-test@"), annotations
        status, metrics = client.get("/metrics")  # multiprocess files on the /var/run/prometheus emptyDir
        assert status == 200 and b"dra_webhook_admission_requests_total{" in metrics
        users = subprocess.run(["ps", "-o", "uid=", "--ppid", str(proc.pid), "-p", str(proc.pid)],
                               capture_output=True, text=True).stdout.split()
        assert users and set(users) == {"65532"}, users
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]



def _hook_command() -> list[str]:
    """The chart's pre-install/pre-upgrade policy check's command (deploy/chart/templates/policy-check.yaml)."""
    text = (ROOT / "deploy" / "chart" / "templates" / "policy-check.yaml").read_text()
    match = re.search(r"^\s+command: \[(.+)\]$", text, re.M)
    assert match, "the policy check's command line"
    return [word.strip() for word in match.group(1).split(",")]


@pytest.mark.parametrize("good", [True, False], ids=["loadable", "broken"])
def test_chart_policy_check_runs_in_the_image(image: tuple[Path, dict[str, Any]], tmp_path: Path,
                                              good: bool) -> None:
    """The hook Pod's command, in the image as the hook runs it: uid 65532, read-only root, no writable volume."""
    bundle, config = image
    policy = tmp_path / "policy"
    policy.mkdir()
    text = (ROOT / "policies" / "default.yaml").read_text()
    (policy / "default.yaml").write_text(text if good else text.replace("kind: MigrationPolicy", "kind: Migration"))
    argv = image_rootfs.run_argv(bundle / "rootfs", _hook_command(), user=config["config"]["User"],
                                 read_only={BUILD.POLICY_DIR: policy}, empty_dirs=())
    # A runtime sets HOME=/ for a uid without a passwd entry.
    proc = subprocess.run(argv, env=image_rootfs.image_env(config, HOME="/"), capture_output=True, text=True,
                          timeout=120)
    if good:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    else:
        assert proc.returncode != 0 and "default.yaml" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
