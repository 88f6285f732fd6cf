"""The end-to-end webhook served from the container image: the real API server calls the image's entrypoint.

The image is built by deploy/image/build.py (or taken from its cache), unpacked with umoci and run by chroot
as its user with a read-only root (tests/image_rootfs.py). It replaces the session's webhook on the same socket
for this module only; the host-run webhook is back before the next module. Skipped without mmdebstrap, umoci or
root (a failure with CI=true).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import image_rootfs
from tests.e2e.objects import pod


@pytest.fixture(scope="module")
def image_webhook(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    image_rootfs.require()
    work = tmp_path_factory.mktemp("image")
    bundle, config = image_rootfs.unpack(image_rootfs.build(work), work / "unpacked")
    cluster.webhook.stop()
    try:
        cluster.webhook.start_from_image(bundle / "rootfs", config)
        yield bundle / "rootfs", config
    finally:
        cluster.webhook.stop()
        cluster.webhook.start()


def test_image_webhook_admits_a_gpu_pod_through_the_api_server(image_webhook: tuple[Path, dict[str, Any]],
                                                               cluster: Any, kube: Any, namespace: Any) -> None:
    rootfs, config = image_webhook
    proc = cluster.webhook.proc
    assert proc is not None and proc.name == "dra-webhook-image"
    # The serving process is the image's: its root is the unpacked root filesystem, its user the image's.
    assert os.readlink(f"/proc/{proc.pid}/root") == str(rootfs)
    status = Path(f"/proc/{proc.pid}/status").read_text()
    uid = config["config"]["User"].split(":")[0]
    assert f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}" in status, status
    ns = namespace("pilot")
    created = kube.create(pod("train", ns))
    annotations = kube.get("v1", "Pod", "train", ns)["metadata"]["annotations"]
    assert annotations["dra-migration.io/path"] == "dra-extended-resource", annotations
    assert annotations["dra-migration.io/policy"] == cluster.webhook.readyz()["policy"]
    assert created.warnings == []
    denied = kube.denial(pod("legacy", namespace("mig"), resource="vendor.example.com/gpu"))
    assert 'admission webhook "workloads.validate.dra-migration.io" denied the request' in denied.message
    assert cluster.forbidden() == [], "the image's webhook needs no permission the ServiceAccount lacks"
