"""Which DRA claims belong to the migration (issue #24 item 11).

Real fleets run other DRA drivers beside the GPU one: the CPU driver (kubernetes-sigs/dra-driver-cpu,
DeviceClass ``dra.cpu``), dranet (google/dranet, ``dranet.net``), Neuron and NIC drivers. Their claims
have nothing to do with moving GPUs off device plugins, so claim rules, toleration injection, the gauges
and ``report`` leave them alone and never count them as migrated.

A claim request is under migration when its DeviceClass is one of ``spec.migration.deviceClasses``
(unset: the DeviceClasses ``resources`` maps), or when the cluster's DeviceClass object selects a driver
of ``spec.migration.drivers`` (unset: the drivers the mapped DeviceClasses select, when the DeviceClass
objects are known). A DeviceClass names its driver in a CEL selector (``device.driver == "gpu.nvidia.com"``,
as the NVIDIA and example drivers' published classes do); that is the only driver a class can be read for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.objects.claims import iter_device_class_selectors

# device.driver == "name" (either quote, either side), the form published DeviceClasses use.
_DRIVER = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']|["']([^"']+)["']\s*==\s*device\.driver""")


def class_drivers(device_class: Mapping[str, Any]) -> frozenset[str]:
    """Drivers a DeviceClass's CEL selectors pin with ``device.driver == "..."`` (empty: none named)."""
    found: set[str] = set()
    for _, expr in iter_device_class_selectors(device_class):
        for m in _DRIVER.finditer(expr):
            found.add(m.group(1) or m.group(2))
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class MigrationScope:
    """DeviceClasses and drivers under migration; ``explicit_*`` say whether the policy named them."""

    classes: frozenset[str]
    drivers: frozenset[str]
    explicit_classes: bool = False
    explicit_drivers: bool = False

    @property
    def everything(self) -> bool:
        """A policy that maps no DeviceClass and names no scope cannot tell claims apart: all are in scope."""
        return not (self.classes or self.drivers or self.explicit_classes or self.explicit_drivers)

    def drivers_with(self, known: Mapping[str, Mapping[str, Any]] | None) -> frozenset[str]:
        """The drivers in scope: the policy's, else those the in-scope classes select (when ``known``)."""
        if self.explicit_drivers or not known:
            return self.drivers
        found: set[str] = set()
        for name in self.classes:
            if name in known:
                found |= class_drivers(known[name])
        return frozenset(found)

    def covers(self, class_name: Any, known: Mapping[str, Mapping[str, Any]] | None,
               drivers: frozenset[str] | None = None) -> bool:
        """Whether a request for ``class_name`` is under migration (``known``: the cluster's DeviceClasses)."""
        if self.everything:
            return True
        if not isinstance(class_name, str) or not class_name:
            return False
        if class_name in self.classes:
            return True
        if not known or class_name not in known:
            return False
        wanted = self.drivers_with(known) if drivers is None else drivers
        return bool(wanted & class_drivers(known[class_name]))

    def foreign(self, class_name: Any, known: Mapping[str, Mapping[str, Any]] | None,
                drivers: frozenset[str] | None = None) -> bool:
        """Whether the cluster's DeviceClass shows a request is another driver's (offline: never known)."""
        if self.covers(class_name, known, drivers) or not known or class_name not in known:
            return False
        return bool(class_drivers(known[class_name]))

    def describe(self, known: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
        """What ``lint`` says about the scope it works with."""
        if self.everything:
            return ["migration scope: every DeviceClass (the policy maps none in resources and sets no "
                    "spec.migration), so claims of every DRA driver are judged and counted"]
        classes = ", ".join(sorted(self.classes)) or "(none)"
        source = "spec.migration.deviceClasses" if self.explicit_classes else "the classes resources map"
        lines = [f"DeviceClasses under migration ({source}): {classes}"]
        drivers = self.drivers_with(known)
        if self.explicit_drivers:
            shown = ", ".join(sorted(drivers)) or "(none)"
            lines.append(f"DRA drivers under migration (spec.migration.drivers): {shown}")
        elif known:
            lines.append("DRA drivers under migration (read from those DeviceClasses' device.driver selectors): "
                         f"{', '.join(sorted(drivers)) or '(none)'}")
        else:
            lines.append("DRA drivers under migration: not known offline (no DeviceClasses given); only the "
                         "classes above count; set spec.migration.drivers to cover every class of a driver")
        lines.append("claims for any other DeviceClass (CPU, NIC, Neuron, network drivers) are left alone and "
                     "not counted as migrated")
        return lines


def scope_of(mapped: Iterable[str], classes: Iterable[str] | None, drivers: Iterable[str] | None) -> MigrationScope:
    """The scope from the policy: its ``migration`` lists, else the mapped DeviceClasses."""
    return MigrationScope(
        classes=frozenset(classes if classes is not None else mapped),
        drivers=frozenset(drivers or ()),
        explicit_classes=classes is not None,
        explicit_drivers=drivers is not None,
    )
