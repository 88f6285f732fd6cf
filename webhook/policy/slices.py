"""Which Pods pin nodes where a device plugin's name is a slice (``spec.sliceNodeLabels``, issue 45 item 5).

With the NVIDIA device plugin's MIG ``single`` strategy, or time-slicing with ``renameByDefault: false``, a node's
``nvidia.com/gpu`` is a MIG device or a time-shared GPU, and GPU feature discovery says so in node labels
(``nvidia.com/gpu.product`` ``A100-SXM4-40GB-MIG-1g.5gb`` or ``...-SHARED``, ``nvidia.com/gpu.replicas``; sources in
``model._nvidia_slice_labels``). On the DRA pool the same name is a whole GPU: the NVIDIA driver's class
``gpu.nvidia.com`` (the one mapping ``nvidia.com/gpu``) selects ``type == 'gpu'``; MIG devices are ``type == 'mig'``
in ``mig.nvidia.com``. A Pod that pins slice nodes (a nodeSelector with such a value, or a required node affinity
term with an ``In`` requirement naming one) therefore stays on the devicePlugin pool (``placement.plan``).
Pure: the spec and the policy only, so online and offline decide alike; ``compile/plan.py`` ``slice_pin`` is the
same test in CEL.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.policy.model import SliceLabel

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True, slots=True)
class CompiledSlice:
    """One ``sliceNodeLabels`` entry with its value globs compiled."""

    entry: SliceLabel
    values: re.Pattern[str] | None

    def means_slice(self, value: Any) -> bool:
        """Whether the label value ``value`` names nodes where the entry's names are slices."""
        if not isinstance(value, str):
            return False
        if self.values is not None:
            return self.values.fullmatch(value) is not None
        assert self.entry.greaterThan is not None
        return re.fullmatch("[0-9]{1,9}", value) is not None and int(value) > self.entry.greaterThan


def compile_slices(entries: Sequence[SliceLabel]) -> tuple[CompiledSlice, ...]:
    out = []
    for e in entries:
        pattern = re.compile("|".join(f"(?:{fnmatch.translate(v)})" for v in e.values)) if e.values else None
        out.append(CompiledSlice(e, pattern))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class SlicePin:
    """What pins a Pod to slice nodes: the entry, and where (``nodeSelector k=v`` / ``node affinity k In [...]``)."""

    entry: SliceLabel
    where: str


def _dict(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _affinity_terms(podspec: Mapping[str, Any]) -> list[Any]:
    required = _dict(_dict(_dict(podspec.get("affinity")).get("nodeAffinity")).get(REQUIRED))
    return _list(required.get("nodeSelectorTerms"))


def slice_pin(podspec: Mapping[str, Any], names: Iterable[str], slices: Sequence[CompiledSlice]) -> SlicePin | None:
    """The first entry (policy order) whose names the spec requests and whose slice nodes it pins, else None."""
    asked = set(names)
    for s in slices:
        if not asked & set(s.entry.resourceNames):
            continue
        key = s.entry.key
        selected = _dict(podspec.get("nodeSelector")).get(key)
        if s.means_slice(selected):
            return SlicePin(s.entry, f"nodeSelector {key}={selected}")
        for term in _affinity_terms(podspec):
            for e in _list(_dict(term).get("matchExpressions")):
                e = _dict(e)
                if e.get("key") == key and e.get("operator") == "In" and any(
                        s.means_slice(v) for v in _list(e.get("values"))):
                    return SlicePin(s.entry, f"node affinity {key} In [{', '.join(map(str, _list(e['values'])))}]")
    return None
