"""The container image for the tests: built by deploy/image/build.py (cached), unpacked, run by chroot.

No container runtime: ``umoci unpack`` gives the image's root filesystem and its runtime configuration;
``run_argv`` starts a command in it the way the Deployment runs the container (deploy/base/deployment.yaml):
in a private mount namespace (``unshare --mount``), the root filesystem bind-mounted read-only
(``readOnlyRootFilesystem``), ``/tmp`` and ``/var/run/prometheus`` as fresh tmpfs (the emptyDirs), the
certificate and policy directories bind-mounted read-only at the Deployment's mount paths, ``/proc`` and
``/dev`` from the host, then ``chroot --userspec=65532:65532`` (``runAsUser``/``runAsGroup``). The process
keeps the host's network, so a listening socket handed over as ``fd://N`` works as in the other tests; each
step ``exec``s the next, so a signal to the returned process reaches the server itself.

With ``CI=true`` missing tools (mmdebstrap, umoci, unshare, chroot) or a non-root user fail the test;
elsewhere they skip it with one line naming what to install (.ci/run installs the Debian packages).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "deploy" / "image" / "build.py"
TOOLS = ("mmdebstrap", "umoci", "unshare", "chroot", "tar")
HOW_TO_GET = "apt-get install mmdebstrap umoci (Debian packages; .ci/run installs them) and run as root"


def missing() -> list[str]:
    out = [tool for tool in TOOLS if shutil.which(tool) is None]
    if os.geteuid() != 0:
        out.append("root (mmdebstrap, chroot and mounts need it)")
    return out


def require() -> None:
    """Skip (fail with CI=true) unless the image can be built and run here."""
    lacking = missing()
    if lacking:
        message = f"cannot build or run the image: missing {', '.join(lacking)}; {HOW_TO_GET}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def build(out_dir: Path) -> Path:
    """The OCI image archive, built by deploy/image/build.py or taken from its cache."""
    declared = subprocess.run([sys.executable, str(BUILD), "--print-config"], check=True, capture_output=True,
                              text=True).stdout
    version = json.loads(declared)["labels"]["org.opencontainers.image.version"]
    archive = out_dir / f"dra-migration-webhook-{version}.oci.tar"
    proc = subprocess.run([sys.executable, str(BUILD), "--output", str(archive)], capture_output=True, text=True,
                          timeout=1800, cwd=ROOT)
    assert proc.returncode == 0, f"deploy/image/build.py failed:\n{proc.stderr[-5000:]}"
    return archive


def unpack(archive: Path, dest: Path) -> tuple[Path, dict[str, Any]]:
    """``umoci unpack`` of the archive's only tag: (bundle directory, the image's OCI config)."""
    layout = dest / "layout"
    layout.mkdir(parents=True)
    subprocess.run(["tar", "-xf", str(archive), "-C", str(layout)], check=True)
    index = json.loads((layout / "index.json").read_text())
    [manifest_ref] = index["manifests"]
    tag = manifest_ref["annotations"]["org.opencontainers.image.ref.name"]
    bundle = dest / "bundle"
    proc = subprocess.run(["umoci", "unpack", "--image", f"{layout}:{tag}", str(bundle)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, f"umoci unpack failed:\n{proc.stderr}"
    manifest = json.loads(_blob(layout, manifest_ref["digest"]))
    return bundle, json.loads(_blob(layout, manifest["config"]["digest"]))


def _blob(layout: Path, digest: str) -> str:
    algorithm, value = digest.split(":")
    return (layout / "blobs" / algorithm / value).read_text()


def build_module() -> ModuleType:
    """deploy/image/build.py as a module (its declared configuration and helpers), loaded once."""
    global _BUILD_MODULE
    if _BUILD_MODULE is None:
        spec = importlib.util.spec_from_file_location("image_build", BUILD)
        assert spec is not None and spec.loader is not None
        _BUILD_MODULE = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_BUILD_MODULE)
    return _BUILD_MODULE


_BUILD_MODULE: ModuleType | None = None


def inside(rootfs: Path, path: str) -> Path:
    """``path`` of the image as a host path, following its links inside ``rootfs`` (/var/run -> /run): build.py's."""
    return build_module().inside(rootfs, path)  # type: ignore[no-any-return]


def run_argv(rootfs: Path, argv: list[str], *, user: str, read_only: dict[str, Path],
             empty_dirs: tuple[str, ...]) -> list[str]:
    """The command line that runs ``argv`` in the unpacked image as the Deployment's container would."""
    r = shlex.quote(str(rootfs))
    lines = ["set -e", f"mount --bind {r} {r}", f"mount -o remount,bind,ro {r}",
             f"mount -t proc proc {r}/proc", f"mount --rbind /dev {r}/dev"]
    uid, gid = user.split(":")
    for path in empty_dirs:
        target = shlex.quote(str(inside(rootfs, path)))
        lines.append(f"mount -t tmpfs -o mode=1777,uid={uid},gid={gid},size=64m tmpfs {target}")
    for path, source in read_only.items():
        target = shlex.quote(str(inside(rootfs, path)))
        lines += [f"mount --bind {shlex.quote(str(source))} {target}", f"mount -o remount,bind,ro {target}"]
    lines.append(f'exec chroot --userspec={user} {r} "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(lines), "image", *argv]


def image_env(config: dict[str, Any], **extra: str) -> dict[str, str]:
    """The image's environment (its config's Env), plus the Deployment's own variables."""
    env = dict(item.split("=", 1) for item in config["config"]["Env"])
    env.update(extra)
    return env


def readable_certs(cert_dir: Path, dest: Path, gid: int) -> Path:
    """The certificates as the Secret volume presents them: mode 0440, group fsGroup (65532)."""
    dest.mkdir()
    for name in ("ca.crt", "tls.crt", "tls.key"):
        shutil.copyfile(cert_dir / name, dest / name)
        os.chown(dest / name, 0, gid)
        os.chmod(dest / name, 0o440)
    os.chmod(dest, 0o755)
    return dest
