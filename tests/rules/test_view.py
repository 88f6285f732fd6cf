"""The cluster-view seam (issue #26 item 1): a lookup's answer and its reason travel together."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from webhook.offline.views import StaticView
from webhook.rules.base import Context
from webhook.rules.view import ABSENT, OFFLINE, Autoscaler, Lookup, OfflineView


def test_the_three_states_and_what_each_says() -> None:
    found = Lookup.found({"a": "b"})
    assert (found.is_found, found.is_absent, found.is_unknown, found.value, found.degraded) == (
        True, False, False, {"a": "b"}, None)
    assert (ABSENT.is_found, ABSENT.is_absent, ABSENT.is_unknown, ABSENT.degraded) == (False, True, False, None)
    over = Lookup.unknown("pod ml-a/p lookup exceeded the 200 ms budget")
    assert (over.is_found, over.is_absent, over.is_unknown, over.value) == (False, False, True, None)
    assert over.degraded == "pod ml-a/p lookup exceeded the 200 ms budget"
    # Offline is unknown too, but a view that never has data has nothing to report.
    assert OFFLINE.is_unknown and not OFFLINE.is_absent and OFFLINE.degraded is None


def test_of_maps_none_to_absent_and_answers_are_immutable() -> None:
    assert Lookup.of(None) is ABSENT
    assert Lookup.of(Autoscaler("h", 1, 3)) == Lookup(Autoscaler("h", 1, 3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ABSENT.reason = "changed"  # type: ignore[misc]


def test_offline_and_static_views_answer_offline_for_what_they_do_not_hold() -> None:
    offline = OfflineView()
    assert {offline.namespace_labels("a"), offline.device_classes(), offline.device_index(),
            offline.get_pod("a", "b"), offline.autoscaler("a", "apps", "Deployment", "d"),
            offline.feature_gates()} == {OFFLINE}
    pod = {"metadata": {"namespace": "a", "name": "p", "uid": "u1"}}
    static = StaticView(namespaces={"a": {"x": "y"}}, pods=[pod])
    assert static.namespace_labels("a").value == {"x": "y"}
    assert static.namespace_labels("b") is OFFLINE and static.device_classes() is OFFLINE
    assert static.get_pod("a", "p", "u1").value is pod
    assert static.get_pod("a", "p", "u2") is OFFLINE  # another uid: not this owner, and not known absent


def test_context_is_read_only() -> None:
    ctx = Context(policy=None, kind="Pod", group="", version="v1", operation="CREATE",  # type: ignore[arg-type]
                  namespace="a", phase="validate", now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), cohort=None,
                  stage="pilot", view=OfflineView())
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.namespace = "b"  # type: ignore[misc]
    assert not hasattr(ctx, "degraded")  # rules return what they lacked in Outcome.degraded


def test_a_static_view_holds_objects_that_have_no_name_yet() -> None:
    """A claim with only ``generateName`` (``check`` on a file of such claims) is no lookup key, not a crash."""
    named = {"metadata": {"name": "a", "namespace": "ns"}, "spec": {}}
    unnamed = {"metadata": {"generateName": "b-", "namespace": "ns"}, "spec": {}}
    view = StaticView(resource_claims=[unnamed, named, {"metadata": None}])
    assert view.get_resource_claim("ns", "a").value == named
    assert view.get_resource_claim("ns", "b-").value is None
