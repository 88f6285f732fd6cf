"""webhook.admission.budget: the shape of a review read from its bytes, and what is refused before parsing."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import gpu_pod, review
from webhook.admission import budget


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _values(value: object) -> int:
    if isinstance(value, dict):
        return 1 + sum(_values(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_values(v) for v in value)
    return 1


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='{}[],:"\\ ab\n'),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(alphabet='{}[],:"\\ a', max_size=3), inner,
                                                                 max_size=4),
    max_leaves=40,
)


@given(JSON)
def test_shape_matches_the_parsed_document_whatever_the_strings_hold(doc):
    body = json.dumps(doc).encode()
    shape = budget.scan(body, max_depth=0)  # depth always measured
    assert shape.depth == _depth(doc)
    assert shape.containers == sum(1 for _ in _containers(doc))
    # every value once; an empty object or array counts one more (its brackets hold no comma, yet one is added)
    assert _values(doc) <= shape.values <= _values(doc) + shape.containers


def _containers(value: object):
    if isinstance(value, (dict, list)):
        yield value
        for v in value.values() if isinstance(value, dict) else value:
            yield from _containers(v)


def test_brackets_commas_and_escaped_quotes_inside_strings_are_not_structure():
    doc = {"a": '"{[,]}\\"', "b": ["\\", "\\\\\"[", "]]]]"], "c": "\u2028{"}
    shape = budget.scan(json.dumps(doc).encode(), max_depth=0)
    assert (shape.containers, shape.depth, shape.values) == (2, 2, 7)


def test_a_kubernetes_review_is_well_within_every_limit():
    body = json.dumps(review(gpu_pod(gpus=8), namespace="pilot-a")).encode()
    shape = budget.scan(body, max_depth=0)
    assert shape.depth < 15 and shape.values < 100
    assert budget.check(body) is None


def deep_review(levels: int) -> bytes:
    """A ConfigMap review whose ``data`` nests ``levels`` objects: the review is level 1, its request 2, the object 3,
    ``data`` 4, so the review nests ``3 + levels`` deep (built as bytes: json.dumps recurses)."""
    doc = review({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": "DATA"})
    return json.dumps(doc).encode().replace(b'"DATA"', b'{"x": ' * (levels - 1) + b"{}" + b"}" * (levels - 1))


@pytest.mark.parametrize(("levels", "refused"), [(budget.MAX_DEPTH - 3, False), (budget.MAX_DEPTH - 2, True),
                                                  (400, True), (1023, True), (5000, True)])
def test_depth_limit_counts_the_review_itself(levels, refused):
    over = budget.check(deep_review(levels))
    assert (over is not None) == refused
    if refused:
        assert over.code == 400 and f"nests {levels + 3:,} levels deep" in over.message


def test_too_many_values_is_413_and_the_depth_is_not_measured():
    body = orjson.dumps({"items": [{}] * (budget.MAX_VALUES + 1)})
    shape = budget.scan(body)
    assert shape.values > budget.MAX_VALUES
    assert shape.depth == shape.containers  # not measured: the body is refused for its values anyway
    over = budget.refusal(shape)
    assert over is not None and over.code == 413 and f"limit of {budget.MAX_VALUES:,}" in over.message


def test_a_body_over_the_size_limit_is_413_without_a_scan():
    over = budget.check(b" " * (budget.MAX_BODY + 1))
    assert over is not None and over.code == 413 and "larger than the webhook's limit" in over.message
    assert budget.check(b"{}", budget.Limits(max_body=1)) is not None


def test_limits_are_parameters():
    body = orjson.dumps({"a": [1, 2, 3]})
    assert budget.check(body) is None
    assert budget.check(body, budget.Limits(max_values=4)).code == 413
    assert budget.check(body, budget.Limits(max_depth=1)).code == 400


def test_request_uid_is_read_from_the_request_only():
    doc = review(gpu_pod())
    uid = doc["request"]["uid"]
    # the API server writes the uid first; a uid anywhere else (the object's, userInfo's) is not the one
    doc = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
           "other": {"uid": "top-level decoy"}, "request": {"kind": {"uid": "nested decoy"},
                                                            "object": {"metadata": {"uid": "object's"}}, "uid": uid}}
    assert budget.request_uid(json.dumps(doc).encode()) == uid
    assert budget.request_uid(json.dumps(doc, indent=3).encode()) == uid
    assert budget.request_uid(b'{"request": {"uid": "a\\"b\\u00e9"}}') == 'a"b\u00e9'


@pytest.mark.parametrize("body", [b"", b"[" * 5000, b'{"request": {"uid": 42}}', b'{"request": {"uid": ""}}',
                                  b'{"request": [{"uid": "x"}]}', b'{"request": {"uid": "x', b"\xff\xfe",
                                  b'{"a": {"request": {"uid": "deeper"}}}'])
def test_request_uid_is_none_when_not_there(body):
    assert budget.request_uid(body) is None


def test_request_uid_reads_a_bounded_number_of_tokens():
    body = b'{"request": {' + b'"a": 1, ' * 20 + b'"uid": "late"}}'
    assert budget.request_uid(body) == "late"
    assert budget.request_uid(body, max_tokens=30) is None
