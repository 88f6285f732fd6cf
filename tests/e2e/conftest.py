"""Session fixtures of the end-to-end suite: one real control plane with the webhook installed from deploy/.

Fixtures other test files use (see README.md):

- ``cluster``: the running :class:`Cluster` (API clients, the webhook process, the control plane);
- ``kube``: a :class:`tests.e2e.kube.Kube` acting as the cluster admin;
- ``namespace``: a factory ``namespace(prefix, labels=None) -> name`` for a fresh namespace per test
  (deleted afterwards); the prefix picks the cohort (``pilot``, ``mig``, anything else is legacy);
- ``policy``: ``policy(text) -> identity`` switches the served policy for this test (restored after);
- marker ``controllers``: the test needs kube-scheduler and kube-controller-manager (skipped, with a
  line saying so, when ``KUBEBUILDER_ASSETS`` provides only an API server).

Every test also fails if the webhook's ServiceAccount was refused anything (403) while it ran.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.e2e import binaries, objects, procs
from tests.e2e.controlplane import ControlPlane
from tests.e2e.install import Webhook, install
from tests.e2e.kube import Kube
from tests.e2e.waits import eventually

log = logging.getLogger("e2e")
DATA = Path(__file__).parent / "data"
DEFAULT_POLICY = DATA / "policy.yaml"
#: The smoke check after installing: a legacy resource name in a migrated namespace is denied.
PROBE_NAMESPACE = "mig-e2e-probe"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "controllers: needs kube-scheduler and kube-controller-manager")


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _binaries() -> binaries.Binaries | str:
    try:
        return binaries.find()
    except binaries.NoBinaries as exc:
        return str(exc)


_E2E_DIR = Path(__file__).parent
_SELECTED: list[str] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """No binaries: skip every e2e test with one reason (a failure with CI=true, in the `cluster` fixture)."""
    mine = [item for item in items if _E2E_DIR in Path(str(item.path)).parents]
    if not mine:
        return
    found = _binaries()
    _SELECTED.append(f"e2e control plane: {found.source}" if isinstance(found, binaries.Binaries)
                     else f"e2e suite skipped: {found}")
    if isinstance(found, str) and not _ci():
        skip = pytest.mark.skip(reason=f"e2e suite skipped: {found}")
        for item in mine:
            item.add_marker(skip)
    elif isinstance(found, binaries.Binaries) and not found.has_controllers:
        _SELECTED.append("e2e: KUBEBUILDER_ASSETS has no kube-scheduler/kube-controller-manager: tests marked "
                         "`controllers` are skipped")
        # At collection time, so module-scoped scenario fixtures are not even set up.
        skip = pytest.mark.skip(reason="needs kube-scheduler and kube-controller-manager, which KUBEBUILDER_ASSETS "
                                "does not carry (unset it to use the project's shared/k8s binaries)")
        for item in mine:
            if item.get_closest_marker("controllers") is not None:
                item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say which control plane the e2e tests used (or why they were skipped), whatever the verbosity."""
    for line in _SELECTED:
        terminalreporter.write_line(line)


@dataclass
class Cluster:
    cp: ControlPlane
    webhook: Webhook
    webhook_configs: list[dict[str, Any]]
    workdir: Path
    kube: Kube = field(init=False)
    reported_forbidden: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.api = self.cp.api()
        self.kube = Kube(self.api)
        self.core = client.CoreV1Api(self.api)

    @property
    def has_controllers(self) -> bool:
        return self.cp.bins.has_controllers

    def forbidden(self) -> list[str]:
        """403s the webhook's ServiceAccount got (audit log) or logged (its own log)."""
        logged = [line for line in self.webhook.output().splitlines() if re.search(r"HTTP 403\b", line)]
        return self.cp.forbidden_for_webhook() + logged

    def wait_webhook_active(self, timeout: float = 30) -> str:
        """Until the API server calls the webhook: a dry-run Pod the e2e policy denies is denied."""
        from tests.e2e.objects import pod

        probe = pod("probe", PROBE_NAMESPACE, resource="vendor.example.com/gpu")

        def denied() -> str:
            exc = self.kube.denial(probe, dry_run=True)
            if "dra-migration.io" not in exc.message:
                raise AssertionError(f"denied, but not by the webhook: {exc.message}")
            return exc.message
        return eventually(denied, "the API server calling the installed webhook", timeout, alive=self.webhook.dead)

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        """A namespace with its ``default`` ServiceAccount (ServiceAccount admission needs it for Pods).

        The controller-manager makes the ServiceAccount; without one (envtest assets) the harness does.
        """
        meta: dict[str, Any] = {"name": name}
        if labels:
            meta["labels"] = labels
        self.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
        if self.has_controllers:
            eventually(lambda: self.kube.get_or_none("v1", "ServiceAccount", "default", name),
                       f"ServiceAccount default in {name}", 30)
        else:
            self.kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                              "metadata": {"name": "default", "namespace": name}})
        return name


def _start(tmp: Path) -> Cluster:
    found = _binaries()
    if isinstance(found, str):
        if _ci():
            pytest.fail(f"CI=true and no control plane for the e2e suite: {found}", pytrace=False)
        pytest.skip(f"e2e suite skipped: {found}")
    log.warning("e2e control plane: %s; work dir %s", found.source, tmp)
    cp = ControlPlane(found, tmp / "cp")
    try:
        cp.start()
        webhook, configs = install(cp, tmp / "webhook", DEFAULT_POLICY)
        cluster = Cluster(cp, webhook, configs, tmp)
        cluster.create_namespace(PROBE_NAMESPACE)
        cluster.wait_webhook_active()
        for obj in objects.gpu_driver_objects():
            cluster.kube.create(obj)
        return cluster
    except BaseException:
        _dump_logs(cp, tmp)
        procs.stop_all()
        raise


def _dump_logs(cp: ControlPlane, tmp: Path) -> None:
    for proc in procs.live():
        print(f"--- {proc.name} ({proc.log}), last lines:\n{proc.output()[-2000:]}")  # noqa: T201


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    previous = signal.getsignal(signal.SIGTERM)

    def interrupted(signum: int, frame: Any) -> None:  # SIGTERM runs the finalizers like Ctrl-C does
        raise KeyboardInterrupt(f"signal {signum}")
    if previous in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, interrupted)
    c = _start(tmp_path_factory.mktemp("e2e"))
    try:
        yield c
        # 403s after the last test that used `kube` (or in a run where none did) still fail the suite.
        late = [f for f in dict.fromkeys(c.forbidden()) if f not in c.reported_forbidden]
        assert not late, "the webhook's ServiceAccount was refused (403):\n" + "\n".join(late)
    finally:
        c.webhook.close()
        c.cp.stop()
        procs.stop_all()
        if previous in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture()
def kube(cluster: Cluster) -> Iterator[Kube]:
    yield cluster.kube
    dead = cluster.cp.dead_component()
    assert not dead, f"a control-plane component died during this test: {dead}"
    # Everything not reported yet, including what happened during the session's set-up.
    new = [f for f in dict.fromkeys(cluster.forbidden()) if f not in cluster.reported_forbidden]
    cluster.reported_forbidden.update(new)
    assert not new, ("the webhook's ServiceAccount was refused (403): the shipped RBAC in deploy/base/rbac.yaml "
                     "misses a permission the cluster view uses:\n" + "\n".join(new))


_COUNTER = itertools.count(1)


@pytest.fixture()
def namespace(cluster: Cluster, kube: Kube, request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    made: list[str] = []
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:30].strip("-")

    def make(prefix: str, labels: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{slug}-{next(_COUNTER)}"[:63].rstrip("-")
        cluster.create_namespace(name, labels)
        made.append(name)
        return name
    yield make
    for name in made:  # the namespace controller deletes what is inside; nobody waits for it
        kube.delete("v1", "Namespace", name, grace=None)


@pytest.fixture()
def policy(cluster: Cluster) -> Iterator[Callable[[str], str]]:
    default = DEFAULT_POLICY.read_text()
    switched = []

    def use(text: str) -> str:
        switched.append(text)
        return cluster.webhook.use_policy(text)
    yield use
    if switched:
        cluster.webhook.use_policy(default)


def policy_variant(replace: dict[str, str]) -> str:
    """The e2e policy with exact text replacements (each must apply once), for the ``policy`` fixture."""
    text = DEFAULT_POLICY.read_text()
    for old, new in replace.items():
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {DEFAULT_POLICY}"
        text = text.replace(old, new)
    return text
