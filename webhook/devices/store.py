"""What the cluster view stores of ResourceSlices, bounded by ``--max-devices``.

The ResourceSlice informer's ``keep`` is a ``SliceKeeper``: each slice is projected (``cel_devices.slice_cache``:
the fields selectors and the rule read, as compact JSON) and stored only while the devices stored stay within
the budget. A slice past it is kept as an ``OverBudget`` marker (its device count, no device data), so the
memory held is bounded by the budget, not by the cluster, and the rule answers "unknown" (fails open) while any
slice is over. Which slices fit is decided in arrival order; ``reconcile`` recounts from the store after every
change (deletions, relists) and says when a marker would now fit, so the view can list again to fill it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.devices.selectors import slice_cache


@dataclass(frozen=True, slots=True)
class OverBudget:
    """A slice not stored because it would take the stored devices past the budget."""

    count: int


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""


class SliceKeeper:
    """The slices informer's ``keep``: a projected slice, or ``OverBudget`` past ``max_devices`` stored."""

    def __init__(self, max_devices: int) -> None:
        self.max_devices = max_devices
        self._lock = threading.Lock()
        self._sizes: dict[str, int] = {}  # name -> devices stored for it
        self._stored = 0

    def __call__(self, obj: dict[str, Any]) -> Any:
        kept = slice_cache(obj)
        name = _name(obj)
        with self._lock:
            self._stored -= self._sizes.pop(name, 0)  # a new version replaces the old one
            if self._stored + kept.count > self.max_devices:
                return OverBudget(kept.count)
            self._sizes[name] = kept.count
            self._stored += kept.count
        return kept

    def reconcile(self, store: Mapping[str, Any]) -> tuple[int, int, bool]:
        """Recount from the informer's store: (devices stored, devices over budget, whether a slice over the
        budget would fit now, e.g. after deletions: then the view should list again)."""
        sizes = {k: v.count for k, v in store.items() if not isinstance(v, OverBudget)}
        over = [v.count for v in store.values() if isinstance(v, OverBudget)]
        with self._lock:
            self._sizes, self._stored = sizes, sum(sizes.values())
            stored = self._stored
        return stored, sum(over), bool(over) and stored + min(over) <= self.max_devices


def stored_slices(values: Iterable[Any]) -> list[Any]:
    """The stored (projected) slices among an informer's values, without the over-budget markers."""
    return [v for v in values if not isinstance(v, OverBudget)]


def over_budget_reason(stored: int, over: int, max_devices: int) -> str:
    return (f"unknown: over --max-devices: {stored + over} devices in ResourceSlices exceed the cluster view's "
            f"budget of {max_devices} ({over} not stored)")
