"""Helpers over raw JSON from requests: never trust a shape (offline input and old objects may be anything)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def metadata_annotations(obj: Mapping[str, Any]) -> dict[str, Any]:
    """metadata.annotations of an object or pod template ({} when absent or malformed)."""
    return as_dict(as_dict(obj.get("metadata")).get("annotations"))
