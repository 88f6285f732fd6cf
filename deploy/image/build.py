#!/usr/bin/env python3
"""Build the dra-migration-webhook container image as an OCI image archive, without Docker or a registry.

    sudo python3 deploy/image/build.py [--output dist/dra-migration-webhook-<version>.oci.tar]

Runs as root (mmdebstrap, chroot, mounts) with Python 3.11 (the image's). Steps, see deploy/image/README.md:

1. a Debian bookworm root filesystem from Debian's packages (``mmdebstrap --variant=essential`` plus
   ``PACKAGES``), cached in ``~/.cache/dra-webhook-image/rootfs-<hash>`` by a hash of those inputs;
2. layer 1: the dependencies' wheels (``pip download --only-binary``, cached by pyproject.toml's dependencies
   and the pip configuration) installed into ``/opt/venv`` from inside the root filesystem (chroot), pip and
   setuptools removed, the Deployment's mount points added; cached as an OCI layout by its inputs' hash;
3. layer 2: the project's wheel and the bundled policy, on an overlay of layer 1 (its upper directory is the
   layer), then the image configuration (``config()`` below, which tests/deploy/test_image.py keeps equal to
   the Dockerfile) set with ``umoci`` and the layout written as an ``oci-archive`` (a tar of an OCI layout).

The finished archive is cached too, by a hash of everything that goes into it, so a second run with unchanged
inputs is a copy. Only the standard library is used: this runs with the host's python3 before anything is installed.
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
NAME = "dra-migration-webhook"
SOURCE = "https://github.com/dra-migration-webhook/dra-migration-webhook"
SUITE = "bookworm"
# libstdc++6: cel-expr-python is C++ (its manylinux wheel links libstdc++.so.6, not in the essential set).
PACKAGES = ("python3", "python3-venv", "ca-certificates", "libstdc++6")
# Docs, man pages and translations are never read in a container: dpkg does not unpack them.
DPKG_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*",
                 "/usr/share/lintian/*")
IMAGE_PYTHON = (3, 11)  # Debian bookworm's python3
VENV = "/opt/venv"
USER = "65532:65532"
POLICY_DIR = "/etc/dra-webhook/policy"
TLS_DIR = "/etc/dra-webhook/tls"
METRICS_DIR = "/var/run/prometheus"  # /var/run is a link to /run in Debian: created as /run/prometheus
PORT = "8443/tcp"
# Bump when a change to this script changes the root filesystem it builds (part of the cache key).
BUILD_REVISION = "2"


def version() -> str:
    """The one version source: pyproject.toml's [project].version."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return str(tomllib.load(handle)["project"]["version"])


def config(image_version: str) -> dict[str, Any]:
    """The image configuration, in the terms of a Dockerfile (tests/deploy/test_image.py compares them)."""
    return {
        "user": USER,
        "entrypoint": ["dra-webhook", "serve"],
        "cmd": ["--policy", POLICY_DIR, "--cert-dir", TLS_DIR, "--bind", "0.0.0.0:8443"],
        "env": {
            "PATH": f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "MALLOC_ARENA_MAX": "2",  # two glibc arenas: freed memory goes back (webhook/serve/memory.py)
            "PROMETHEUS_MULTIPROC_DIR": METRICS_DIR,
            "DRA_WEBHOOK_POLICY": POLICY_DIR,
        },
        "labels": {
            "org.opencontainers.image.title": NAME,
            "org.opencontainers.image.description":
                "Admission webhook moving GPU workloads from device plugins to Kubernetes DRA",
            "org.opencontainers.image.version": image_version,
            "org.opencontainers.image.source": SOURCE,
            "org.opencontainers.image.licenses": "Apache-2.0",
        },
        "exposed_ports": [PORT],
        "workdir": "/",
    }


def run(*argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(argv), file=sys.stderr, flush=True)
    return subprocess.run(argv, check=True, text=True, **kwargs)


def digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def rootfs_key() -> str:
    inputs = {"suite": SUITE, "packages": PACKAGES, "excludes": DPKG_EXCLUDES, "revision": BUILD_REVISION,
              "sources": Path("/etc/apt/sources.list.d/debian.sources").read_text()
              if Path("/etc/apt/sources.list.d/debian.sources").exists() else ""}
    return digest(json.dumps(inputs, sort_keys=True).encode())


def base_rootfs(cache: Path) -> tuple[Path, str]:
    """The cached Debian root filesystem (built on first use); returns its directory and cache key."""
    key = rootfs_key()
    done = cache / f"rootfs-{key}"
    if (done / ".complete").exists():
        return done / "rootfs", key
    staging = Path(tempfile.mkdtemp(prefix="tmp-rootfs-", dir=cache))
    run("mmdebstrap", "--quiet", "--variant=essential", f"--include={','.join(PACKAGES)}",
        *(f"--dpkgopt=path-exclude={pattern}" for pattern in DPKG_EXCLUDES),
        # apt's lists and downloaded .debs are not part of the image.
        "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/* \"$1\"/var/log/*.log",
        SUITE, str(staging / "rootfs"))
    (staging / ".complete").write_text(key + "\n")
    shutil.rmtree(done, ignore_errors=True)
    staging.rename(done)
    return done / "rootfs", key


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]


def wheels(out: Path, cache: Path) -> list[Path]:
    """The project's wheel and every dependency's, binary only (as the Dockerfile's --only-binary).

    The dependencies' wheels are resolved once per input (pyproject.toml's dependencies, this pip's
    configuration: its indexes and constraints) and kept in ``cache/wheels-<hash>``: resolving them is most of
    a build whose root filesystem and dependency layer are cached.
    """
    run(*PIP, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(ROOT))
    own = sorted(out.glob("dra_migration_webhook-*.whl"))
    with (ROOT / "pyproject.toml").open("rb") as handle:
        dependencies = tomllib.load(handle)["project"]["dependencies"]
    pip_config = subprocess.run([*PIP, "config", "list"], capture_output=True, text=True, check=True).stdout
    key = digest(json.dumps(dependencies).encode(), pip_config.encode(), sys.version.encode(),
                 os.environ.get("PIP_CONSTRAINT", "").encode(), BUILD_REVISION.encode())
    done = cache / f"wheels-{key}"
    if not (done / ".complete").exists():
        staging = Path(tempfile.mkdtemp(prefix="tmp-wheels-", dir=cache))
        run(*PIP, "download", "--quiet", "--only-binary=:all:", "--dest", str(staging), str(own[0]))
        for copied in staging.glob("dra_migration_webhook-*.whl"):
            copied.unlink()
        (staging / ".complete").write_text(key + "\n")
        for old in cache.glob("wheels-*"):  # keep one
            shutil.rmtree(old, ignore_errors=True)
        staging.rename(done)
    return [own[0], *sorted(done.glob("*.whl"))]


def wheel_digest(path: Path) -> bytes:
    """The contents of a wheel, independent of the zip's timestamps (our wheel is rebuilt every run)."""
    with zipfile.ZipFile(path) as archive:
        members = sorted((info.filename, hashlib.sha256(archive.read(info)).hexdigest())
                         for info in archive.infolist())
    return json.dumps([path.name, members]).encode()


def inside(root: Path, path: str) -> Path:
    """``path`` of the root filesystem as a host path, following its links within ``root`` (never out)."""
    current = root
    for part in Path(path).relative_to("/").parts:
        candidate = current / part
        if candidate.is_symlink():
            target = os.readlink(candidate)
            candidate = inside(root, target) if target.startswith("/") else (current / target).resolve()
        current = candidate
    return current


# SOURCE_DATE_EPOCH makes pip's compileall write hash-checked .pyc files (py_compile's default then): the layers
# carry mtime 0, so timestamp-checked ones would all be stale and every process would recompile every module
# in memory at start (the root filesystem is read-only).
CHROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8", "SOURCE_DATE_EPOCH": "0",
              "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INDEX": "1"}


def own_wheel(wheel_files: list[Path]) -> Path:
    return next(w for w in wheel_files if w.name.startswith("dra_migration_webhook-"))


def install_dependencies(rootfs: Path, wheel_files: list[Path]) -> None:
    """/opt/venv from inside the root filesystem (its own python3) with every dependency; no pip, no setuptools."""
    staged = rootfs / "tmp" / "wheels"
    staged.mkdir(parents=True)
    deps = [w for w in wheel_files if w != own_wheel(wheel_files)]
    for wheel in deps:
        shutil.copy2(wheel, staged)
    run("chroot", str(rootfs), "/usr/bin/python3", "-m", "venv", VENV, env=CHROOT_ENV)
    run("chroot", str(rootfs), f"{VENV}/bin/pip", "install", "--quiet", "--only-binary=:all:", "--no-deps",
        *(f"/tmp/wheels/{w.name}" for w in deps), env=CHROOT_ENV)
    run("chroot", str(rootfs), f"{VENV}/bin/pip", "uninstall", "--quiet", "--yes", "pip", "setuptools",
        env=CHROOT_ENV)
    shutil.rmtree(staged)
    shutil.rmtree(rootfs / "root" / ".cache", ignore_errors=True)
    inside(rootfs, POLICY_DIR).mkdir(parents=True, exist_ok=True)
    inside(rootfs, TLS_DIR).mkdir(parents=True, exist_ok=True)
    metrics = inside(rootfs, METRICS_DIR)
    metrics.mkdir(parents=True, exist_ok=True)
    uid, gid = (int(n) for n in USER.split(":"))
    os.chown(metrics, uid, gid)


def install_application(lower: Path, upper: Path, work: Path, wheel: Path, policy: Path) -> None:
    """Our wheel and the policy on an overlay of the dependencies' root filesystem: ``upper`` is the layer.

    pip runs from Debian's own pip wheel (python3-venv's /usr/share/python-wheels), with the venv's python,
    so the venv needs no pip of its own; the wheel directory is bind-mounted, never copied into the layer.
    """
    merged, overlay_work = work / "merged", work / "overlay-work"
    for directory in (upper, merged, overlay_work, work / "app-wheel"):
        directory.mkdir(parents=True)
    shutil.copy2(wheel, work / "app-wheel")
    pips = sorted((lower / "usr" / "share" / "python-wheels").glob("pip-*.whl"))
    script = f"""set -e
mount -t overlay overlay -o lowerdir={lower},upperdir={upper},workdir={overlay_work} {merged}
mount -t tmpfs tmpfs {merged}/tmp
mkdir {merged}/tmp/wheels
mount --bind {work}/app-wheel {merged}/tmp/wheels
chroot {merged} {VENV}/bin/python /usr/share/python-wheels/{pips[-1].name}/pip install --quiet --no-deps \
  /tmp/wheels/{wheel.name}
umount {merged}/tmp/wheels {merged}/tmp
cp {policy} {inside(merged, POLICY_DIR)}/default.yaml
umount {merged}
"""
    run("unshare", "--mount", "--propagation", "private", "sh", "-c", script, env=CHROOT_ENV)
    leftovers = [str(p) for p in upper.rglob("*") if p.is_char_device()]
    if leftovers:
        raise RuntimeError(f"the application step deleted files (overlay whiteouts): {leftovers}")


def layer_tar(rootfs: Path, out: Path) -> None:
    """One reproducible layer: sorted, numeric owners, fixed mtimes; no device nodes (the runtime's /dev)."""
    epoch = "0"  # the cached layer 1 must not depend on the time of the build
    run("tar", "--create", "--file", str(out), "--directory", str(rootfs), "--sort=name", "--numeric-owner",
        f"--mtime=@{epoch}", "--clamp-mtime", "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*",
        "--exclude=./tmp/*", "--exclude=./root/.cache", ".")


def add_layer(layout: Path, tag: str, tree: Path, work: Path, what: str, when: str) -> None:
    layer = work / "layer.tar"
    layer_tar(tree, layer)
    run("umoci", "raw", "add-layer", "--image", f"{layout}:{tag}", f"--history.created={when}",
        "--history.created_by", f"deploy/image/build.py: {what}", str(layer))
    layer.unlink()


def dependencies_image(cache: Path, base: Path, key: str, wheel_files: list[Path]) -> Path:
    """The cached first layer (Debian + /opt/venv with the dependencies) as an OCI layout, and its rootfs."""
    done = cache / f"deps-{key}"
    if (done / ".complete").exists():
        return done
    staging = Path(tempfile.mkdtemp(prefix="tmp-deps-", dir=cache))
    rootfs = staging / "rootfs"
    run("cp", "--archive", str(base), str(rootfs))
    install_dependencies(rootfs, wheel_files)
    layout = staging / "layout"
    run("umoci", "init", "--layout", str(layout))
    run("umoci", "new", "--image", f"{layout}:deps")
    add_layer(layout, "deps", rootfs, staging, f"Debian {SUITE} {' '.join(PACKAGES)}, {VENV} dependencies",
              "1970-01-01T00:00:00Z")  # cached: independent of the build's time
    (staging / ".complete").write_text(key + "\n")
    for old in cache.glob("deps-*"):  # keep one
        shutil.rmtree(old, ignore_errors=True)
    staging.rename(done)
    return done


def created() -> str:
    """The image's creation time: $SOURCE_DATE_EPOCH, else the last commit's time (reproducible builds)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is None:
        proc = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], capture_output=True, text=True)
        epoch = proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "0"
    return datetime.datetime.fromtimestamp(int(epoch), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def configure(layout: Path, tag: str, image_version: str) -> None:
    cfg = config(image_version)
    argv = ["umoci", "config", "--image", f"{layout}:{tag}", "--no-history", f"--created={created()}",
            "--clear=config.entrypoint", "--clear=config.cmd", "--clear=config.env", f"--config.user={cfg['user']}",
            f"--config.workingdir={cfg['workdir']}", "--os=linux", "--architecture=amd64"]
    argv += [f"--config.entrypoint={arg}" for arg in cfg["entrypoint"]]
    argv += [f"--config.cmd={arg}" for arg in cfg["cmd"]]
    argv += [f"--config.env={key}={value}" for key, value in cfg["env"].items()]
    argv += [f"--config.label={key}={value}" for key, value in cfg["labels"].items()]
    argv += [f"--manifest.annotation={key}={value}" for key, value in cfg["labels"].items()]
    argv += [f"--config.exposedports={port}" for port in cfg["exposed_ports"]]
    run(*argv)


def assemble(deps: Path, wheel: Path, policy: Path, image_version: str, out: Path, work: Path) -> None:
    """Layer 2 (our package, the policy) on a copy of the cached layout, the configuration, the archive."""
    layout = work / "layout"
    run("cp", "--archive", str(deps / "layout"), str(layout))
    run("umoci", "tag", "--image", f"{layout}:deps", image_version)
    run("umoci", "rm", "--image", f"{layout}:deps")
    upper = work / "upper"
    install_application(deps / "rootfs", upper, work, wheel, policy)
    add_layer(layout, image_version, upper, work, f"{wheel.name}, policies/default.yaml", created())
    configure(layout, image_version, image_version)
    run("umoci", "gc", "--layout", str(layout))
    # An oci-archive is a tar of an OCI layout (containers/image oci/archive); index.json names the tag.
    run("tar", "--create", "--file", str(out), "--directory", str(layout), "--sort=name", "--numeric-owner",
        "--owner=0", "--group=0", "--mtime=@0", ".")


def build(output: Path, cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    image_version = version()
    base, base_key = base_rootfs(cache)
    with tempfile.TemporaryDirectory(prefix="image-", dir=cache) as tmp:
        work = Path(tmp)
        wheel_files = wheels(work / "wheels", cache)
        wheel = own_wheel(wheel_files)
        deps_key = digest(base_key.encode(), *(wheel_digest(w) for w in wheel_files if w != wheel),
                          BUILD_REVISION.encode())
        policy = ROOT / "policies" / "default.yaml"
        key = digest(deps_key.encode(), wheel_digest(wheel), policy.read_bytes(), created().encode(),
                     json.dumps(config(image_version), sort_keys=True).encode())
        cached = cache / f"{NAME}-{image_version}-{key}.oci.tar"
        if not cached.exists():
            deps = dependencies_image(cache, base, deps_key, wheel_files)
            partial = work / "image.oci.tar"
            assemble(deps, wheel, policy, image_version, partial, work)
            for old in cache.glob(f"{NAME}-*.oci.tar"):  # keep one finished image
                old.unlink()
            partial.rename(cached)
    output.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, output)
    print(f"{output} ({output.stat().st_size} bytes, cache key {key})", file=sys.stderr)
    return output


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, help="default: dist/dra-migration-webhook-<version>.oci.tar")
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "XDG_CACHE_HOME", Path.home() / ".cache")) / "dra-webhook-image")
    parser.add_argument("--print-config", action="store_true", help="print the image configuration and exit")
    args = parser.parse_args()
    if args.print_config:
        print(json.dumps(config(version()), indent=2))
        return 0
    if sys.version_info[:2] != IMAGE_PYTHON:
        # The dependency wheels are resolved by this interpreter: they must fit the image's python3.
        print(f"deploy/image/build.py: run it with Python {'.'.join(map(str, IMAGE_PYTHON))} (Debian {SUITE}'s "
              f"python3, which the image carries), not {sys.version.split()[0]}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("deploy/image/build.py: needs root (mmdebstrap, chroot)", file=sys.stderr)
        return 2
    missing = [tool for tool in ("mmdebstrap", "umoci", "tar", "unshare") if shutil.which(tool) is None]
    if missing:
        print(f"deploy/image/build.py: missing {', '.join(missing)}: apt-get install mmdebstrap umoci",
              file=sys.stderr)
        return 2
    args.cache.mkdir(parents=True, exist_ok=True)
    # One build at a time per cache (the suite's two workers may both ask for the image).
    with (args.cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build(args.output or ROOT / "dist" / f"{NAME}-{version()}.oci.tar", args.cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
