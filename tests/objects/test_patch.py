"""webhook.objects.patch: the request-path diff must produce patches jsonpatch applies to exactly the target."""

from __future__ import annotations

from typing import Any

import jsonpatch
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.objects.patch import clone, make_patch

SCALARS = (st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, 1.0, 2.5])
           | st.sampled_from(["", "a", "b", "x/y", "m~n"]))
KEYS = st.sampled_from(["a", "b", "c", "x/y", "m~n", "~1", ""])
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
                      max_leaves=25)


def exact(x: Any) -> bytes:
    return orjson.dumps(x, option=orjson.OPT_SORT_KEYS)


@settings(max_examples=1500, derandomize=True, deadline=None)
@given(VALUES, VALUES)
def test_patch_applies_and_yields_the_target_exactly(src, dst):
    before = exact(src)
    ops = make_patch(src, dst)
    assert exact(jsonpatch.apply_patch(src, ops)) == exact(dst)
    assert exact(src) == before  # the source is not modified
    assert make_patch(dst, clone(dst)) == []


def test_types_count_as_changes():
    assert make_patch({"a": 1}, {"a": True}) == [{"op": "replace", "path": "/a", "value": True}]
    assert make_patch([1.0], [1]) == [{"op": "replace", "path": "/0", "value": 1}]


def test_added_map_is_added_whole_and_keys_are_escaped():
    src = {"metadata": {"name": "p"}}
    dst = {"metadata": {"name": "p", "annotations": {"dra-migration.io/path": "dra-claim"}}}
    assert make_patch(src, dst) == [{"op": "add", "path": "/metadata/annotations",
                                     "value": {"dra-migration.io/path": "dra-claim"}}]
    assert make_patch(dst, {"metadata": {"name": "p", "annotations": {"dra-migration.io/path": "x"}}}) == [
        {"op": "replace", "path": "/metadata/annotations/dra-migration.io~1path", "value": "x"}]


def test_clone_is_deep_and_survives_non_json():
    doc = {"a": [{"b": 1}]}
    copy_ = clone(doc)
    copy_["a"][0]["b"] = 2
    assert doc == {"a": [{"b": 1}]}
    deep: Any = []
    for _ in range(300):  # deeper than orjson serialises: falls back to copy.deepcopy
        deep = [deep]
    assert clone(deep) == deep


def test_mutating_rules_never_touch_the_object_received():
    """Copy-on-write in the rules: the request's object is byte-for-byte the same after evaluation."""
    import datetime as dt
    import json
    from pathlib import Path

    from webhook.admission.engine import evaluate
    from webhook.admission.review import parse_request
    from webhook.policy.loader import load

    policy = load(Path(__file__).resolve().parents[2] / "policies" / "default.yaml")
    reviews = sorted((Path(__file__).resolve().parents[2] / "bench" / "reviews").glob("*.json"))
    assert reviews
    for path in reviews:
        req = parse_request(json.loads(path.read_text())["request"])
        before = exact(req.object)
        decision = evaluate(req, policy, None, "mutate", dt.datetime(2026, 12, 10, tzinfo=dt.UTC))
        assert exact(req.object) == before, path.name
        if decision.patch:
            assert exact(jsonpatch.apply_patch(req.object, decision.patch)) == exact(decision.mutated)
