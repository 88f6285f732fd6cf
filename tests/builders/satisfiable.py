"""dra-example-driver and NVIDIA MIG objects for the satisfiable rule: ResourceSlices, DeviceClasses, templates."""

from __future__ import annotations

from typing import Any

EXAMPLE_DRIVER = "gpu.dra-example-driver.sigs.k8s.io"
# dra-example-driver cel-selector.yaml, verbatim.
EXAMPLE_MODEL = "device.attributes['gpu.dra-example-driver.sigs.k8s.io'].model == 'LATEST-GPU-MODEL'"
EXAMPLE_MEMORY = "device.capacity['gpu.dra-example-driver.sigs.k8s.io'].memory.compareTo(quantity('4Gi')) >= 0"
# NVIDIA mig-1g-12gb.yaml's DeviceClass selector, verbatim.
NVIDIA_MIG = ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig' && "
              "device.attributes['gpu.nvidia.com'].profile == '1g.12gb'")


def example_slice(node: str, gpus: int, memory: str = "80Gi", model: str = "LATEST-GPU-MODEL") -> dict[str, Any]:
    """A ResourceSlice as dra-example-driver publishes it for ``node``."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-example"},
            "spec": {"driver": EXAMPLE_DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                          "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {
                         "index": {"int": i}, "uuid": {"string": f"gpu-{node}-{i}"}, "model": {"string": model},
                         "driverVersion": {"version": "1.0.0"}}, "capacity": {"memory": {"value": memory}}}
                         for i in range(gpus)]}}


def nvidia_slice(node: str, gpus: int, migs: int) -> dict[str, Any]:
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "productName": {
        "string": "NVIDIA GH200 96GB HBM3"}}, "capacity": {"memory": {"value": "96Gi"}}} for i in range(gpus)]
    devices += [{"name": f"gpu-0-mig-{i}", "attributes": {"type": {"string": "mig"}, "profile": {"string": "1g.12gb"}},
                 "capacity": {"memory": {"value": "12Gi"}}} for i in range(migs)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-nvidia"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def device_class(name: str, expression: str, extended: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


EXAMPLE_CLASS = device_class(EXAMPLE_DRIVER, f"device.driver == '{EXAMPLE_DRIVER}'")


def template(*selectors: str, count: int | None = None, class_name: str = EXAMPLE_DRIVER) -> dict[str, Any]:
    """dra-example-driver's single-gpu-cel ResourceClaimTemplate, with the selectors (and count) given."""
    exactly: dict[str, Any] = {"deviceClassName": class_name,
                               "selectors": [{"cel": {"expression": e}} for e in selectors]}
    if count is not None:
        exactly["count"] = count
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"namespace": "cel-selector", "name": "single-gpu-cel"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}}
