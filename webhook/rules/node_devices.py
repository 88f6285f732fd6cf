"""Rules on what the node's other device plugins mean for a Pod whose GPUs move to DRA (issue 45 items 3 and 5).

``device-plugin-nic-beside-dra``: the kubelet's Topology Manager aligns what its hint providers allocate, and the DRA
manager is none of them, so a container's DRA GPUs and its device-plugin NIC are no longer placed together.
``device-plugin-slice``: a Pod pinning nodes where the device plugin's name is a MIG slice or a time-shared GPU
stays on the device-plugin pool (``placement.plan``); the finding says which DeviceClass serves the slice through DRA.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from webhook.objects.pods import container_extended, field_path, iter_containers
from webhook.policy import rule_ids as ids
from webhook.policy.placement import plan
from webhook.rules.base import Context, Finding, Outcome
from webhook.rules.memo import usage_of
from webhook.rules.workloads import examined_templates, pod_rule

MESSAGE_MAX = 199
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
"""k8s.io/dynamic-resource-allocation deviceattribute/constants.go ``StandardDeviceAttributePCIeRoot`` (kubernetes
staging, 8ed8217e): the PCIe Root Complex, ``pci<domain>:<bus>``, shared by devices under the same root."""
_DRA_PATHS = ("dra-extended-resource", "mixed")


def _clip(text: str) -> str:
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 3] + "..."


def _nic_fix(gpus: list[str], nics: list[str]) -> str:
    return (
        f"move the NIC to DRA with a matchAttribute {PCIE_ROOT} constraint\n"
        f"One ResourceClaim with a GPU request and a request for {', '.join(nics)}'s DRA counterpart (a NIC DRA "
        f"driver's DeviceClass) and constraints [{{requests: [gpu, nic], matchAttribute: {PCIE_ROOT}}}]: the "
        f"scheduler then picks a GPU and a NIC under the same PCIe root. Or keep {', '.join(gpus)} on the device "
        "plugin (the devicePlugin pool, or an exception for this namespace) until the NIC moves.\n"
        "The kubelet's Topology Manager aligns only what its hint providers allocate (device manager, CPU and memory "
        "managers; kubernetes pkg/kubelet/cm/container_manager_linux.go NewContainerManager): DRA devices are not "
        "among them, so GPUDirect RDMA between this container's GPUs and NICs is no longer guaranteed."
    )


@pod_rule(ids.DEVICE_PLUGIN_NIC_BESIDE_DRA)
def device_plugin_nic_beside_dra(obj: dict[str, Any], ctx: Context) -> Outcome:
    """A container's GPUs would be served by DRA while it keeps a device-plugin NIC or RDMA resource (advisory).

    Judged on ``placement.plan``'s path (pilot steering, migrated cohorts, a legacy Pod only DRA serves): the names
    DRA serves there beside a name of ``spec.topologyAlignedResources`` (``vpc.amazonaws.com/efa``, ``rdma/*``,
    ``intel.com/*`` by default) in the same container. The kubelet's Topology Manager merges the hints of the device
    manager, the CPU manager and the memory manager only (kubernetes pkg/kubelet/cm/container_manager_linux.go
    ``NewContainerManager``: ``AddHintProvider`` for those three; ``dra.NewManager`` is not added; master 001332b0,
    1.37), so a multi-node NCCL job silently loses GPU/NIC alignment. The fix is a claim with a ``matchAttribute``
    constraint on ``resource.kubernetes.io/pcieRoot`` for a GPU and a DRA NIC.
    """
    policy = ctx.policy
    aligned = policy.topology_aligned
    if aligned is None:
        return Outcome()
    findings = []
    for ref in examined_templates(obj, ctx):
        u = usage_of(ref.spec_as_run(obj), policy, ctx.memo)
        where = plan(u, ctx.stage, policy)
        if not u.er or where.path not in _DRA_PATHS:
            continue
        advertised = policy.advertised[where.pool or "dra"]
        for c in iter_containers(ref.spec(obj)):
            names = [n for n, count in container_extended(c.container).items() if count > 0]
            gpus = sorted(n for n in names if n in u.er and n not in advertised)
            nics = sorted(n for n in names if aligned.fullmatch(n))
            if not (gpus and nics):
                continue
            findings.append(Finding(
                ids.DEVICE_PLUGIN_NIC_BESIDE_DRA,
                _clip(f'{ref.where()}container "{c.name}": {", ".join(gpus)} on DRA beside device-plugin '
                      f'{", ".join(nics)}: not topology-aligned'),
                _nic_fix(gpus, nics),
                (field_path(ref.at("spec", c.field, c.index, "resources")),),
                advisory=True,
            ))
    return Outcome(findings)


def _slice_fix(sharing: str, device_class: str, names: str) -> str:
    if sharing == "MIG":
        how = (f"Request a MIG device by claim: DeviceClass {device_class} with a selector on the profile, e.g. "
               "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'.")
    else:
        how = (f"Share a GPU by claim: DeviceClass {device_class} with an opaque GpuConfig whose sharing strategy is "
               "TimeSlicing, or one ResourceClaim the Pods reference together.")
    return (f"to use DRA, claim DeviceClass {device_class} and drop the node pin\n{how} Until then it runs where "
            f"the device plugin serves {names} as slices; on the dra pool {names} is a whole device. Edit "
            "spec.sliceNodeLabels if these labels mean something else in this cluster.")


@pod_rule(ids.DEVICE_PLUGIN_SLICE)
def device_plugin_slice(obj: dict[str, Any], ctx: Context) -> Outcome:
    """A Pod pins nodes where its device-plugin name is a MIG slice or a time-shared GPU: kept off the dra pool.

    ``spec.sliceNodeLabels`` (default: NVIDIA GPU feature discovery's ``nvidia.com/gpu.product`` ``*-MIG-*`` /
    ``*-SHARED``, ``nvidia.com/mig.strategy=single``, ``nvidia.com/gpu.replicas`` above 1) says which node labels
    mean that. On the DRA pool the same name is a whole GPU (the NVIDIA driver's ``gpu.nvidia.com`` maps
    ``nvidia.com/gpu`` and selects ``type == 'gpu'``; MIG devices are ``type == 'mig'`` in ``mig.nvidia.com``), so
    the Pod would stay Pending or take a whole GPU. ``placement.plan`` keeps it on the devicePlugin pool; this
    advisory finding fires where the plan would otherwise have sent it to the dra pool, and names the DeviceClass
    that serves the slice through DRA.
    """
    policy = ctx.policy
    findings = []
    for ref in examined_templates(obj, ctx):
        u = usage_of(ref.spec_as_run(obj), policy, ctx.memo)
        pin = u.slice
        if pin is None or plan(replace(u, slice=None), ctx.stage, policy).pool != "dra":
            continue
        kept = plan(u, ctx.stage, policy).pool
        names = ", ".join(sorted(n for n in (*u.er, *u.legacy) if n in pin.entry.resourceNames))
        findings.append(Finding(
            ids.DEVICE_PLUGIN_SLICE,
            _clip(f"{ref.where()}Pod pins {pin.where}, where {names} is a {pin.entry.sharing} slice: "
                  + (f"kept on the {kept} pool" if kept else "not steered to the dra pool")),
            _slice_fix(pin.entry.sharing, pin.entry.deviceClassName, names),
            (field_path(ref.at("spec", "nodeSelector")), field_path(ref.at("spec", "affinity"))),
            advisory=True,
        ))
    return Outcome(findings)
