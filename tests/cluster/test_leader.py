"""The gauge writers' Lease (webhook.cluster.leader) against the fake API server: acquire, renew, lose, take over.

Time is injected (one fake monotonic clock and wall clock shared by the candidates), so expiry is decided
by the test, never raced against a sleep.
"""

from __future__ import annotations

import datetime as dt

import pytest

from tests.fakeapi import FakeAPI
from webhook.cluster import api as cluster
from webhook.cluster.leader import LeaseElector, lease_spec, micro_time
from webhook.serve.gauge_writer import identity, lease_namespace

T0 = dt.datetime(2027, 1, 20, 9, 30, tzinfo=dt.UTC)
NS, NAME = "dra-webhook", "dra-webhook-gauges"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> dt.datetime:
        return T0 + dt.timedelta(seconds=self.t - 1000.0)


@pytest.fixture()
def fake(tmp_path):
    with FakeAPI() as api:
        yield api, cluster.connect(api.write_kubeconfig(tmp_path)), Clock()


def _elector(client, clock: Clock, who: str) -> LeaseElector:
    return LeaseElector(client, NS, NAME, who, lease_duration=15, renew_deadline=10, clock=clock.mono,
                        wall=clock.wall)


def _spec(api: FakeAPI) -> dict:
    return api._store["leases"][(NS, NAME)]["spec"]


def test_micro_time_always_has_six_fractional_digits() -> None:
    assert micro_time(T0) == "2027-01-20T09:30:00.000000Z"
    assert micro_time(dt.datetime(2027, 1, 20, 10, 30, 0, 5, tzinfo=dt.timezone(dt.timedelta(hours=1)))) == \
        "2027-01-20T09:30:00.000005Z"


def test_lease_spec_keeps_the_holders_acquire_time_and_counts_a_new_holder() -> None:
    first = lease_spec("a", 15, T0, None)
    assert first["leaseTransitions"] == 0 and first["acquireTime"] == first["renewTime"]
    later = T0 + dt.timedelta(seconds=5)
    renewed = lease_spec("a", 15, later, first)
    assert renewed["acquireTime"] == first["acquireTime"] and renewed["renewTime"] == micro_time(later)
    assert renewed["leaseTransitions"] == 0
    taken = lease_spec("b", 15, later, renewed)
    assert taken["acquireTime"] == micro_time(later) and taken["leaseTransitions"] == 1


def test_the_first_candidate_creates_the_lease_and_the_second_follows(fake) -> None:
    api, client, clock = fake
    a, b = _elector(client, clock, "a"), _elector(client, clock, "b")
    assert a.tick() is True
    assert _spec(api) == {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": micro_time(T0),
                          "renewTime": micro_time(T0), "leaseTransitions": 0}
    assert b.tick() is False and b.holder == "a"
    assert api.count("leases", "create") == 1


def test_the_holder_renews_and_a_follower_never_takes_a_renewed_lease(fake) -> None:
    api, client, clock = fake
    a, b = _elector(client, clock, "a"), _elector(client, clock, "b")
    a.tick()
    b.tick()
    for _ in range(5):  # 45 s in all, far past one lease duration, but renewed every 9 s
        clock.t += 8
        assert a.tick() is True
        clock.t += 1
        assert b.tick() is False
    spec = _spec(api)
    assert spec["holderIdentity"] == "a" and spec["acquireTime"] == micro_time(T0)
    assert spec["renewTime"] == micro_time(clock.wall() - dt.timedelta(seconds=1))
    assert spec["leaseTransitions"] == 0
    # The holder's fast path: one PUT per renewal, no GET (the GETs: a's first, 404, and b's six).
    assert api.count("leases", "update") == 5 and api.count("leases", "get") == 7


def test_a_follower_takes_over_an_expired_lease_and_the_old_holder_steps_down(fake) -> None:
    api, client, clock = fake
    a, b = _elector(client, clock, "a"), _elector(client, clock, "b")
    a.tick()
    b.tick()  # b observes a's record now
    clock.t += 14
    assert b.tick() is False  # 14 s after b saw it change: still valid
    clock.t += 1.5
    assert b.tick() is True  # 15.5 s without a change: expired, taken over
    spec = _spec(api)
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert spec["acquireTime"] == micro_time(clock.wall())
    # a stopped renewing (a long pause): it is past its renew deadline and must not act as leader ...
    assert a.leading is False
    # ... and when it comes back, its stale write is refused (409) and it sees b's valid Lease.
    assert a.tick() is False and a.holder == "b"
    assert _spec(api)["holderIdentity"] == "b"


def test_a_conflicting_write_loses_the_race(fake) -> None:
    api, client, clock = fake
    a, b = _elector(client, clock, "a"), _elector(client, clock, "b")
    a.tick()
    b.tick()
    clock.t += 16  # a stopped renewing: expired in b's view

    def c_writes_first(resource: str, verb: str) -> None:  # between b's GET and b's PUT
        api.before_write = None
        stored = api._store["leases"][(NS, NAME)]
        api.put({**stored, "spec": lease_spec("c", 15, clock.wall(), stored["spec"])})

    api.before_write = c_writes_first
    assert b.tick() is False  # b's PUT carried the resourceVersion it read: 409 Conflict
    assert (b.last_error or "").startswith("409")
    assert _spec(api)["holderIdentity"] == "c" and _spec(api)["leaseTransitions"] == 1
    assert b.tick() is False and b.holder == "c"  # and c's fresh record is respected
    assert a.tick() is False and a.holder == "c"


def test_conflict_on_the_holders_renewal_drops_leadership_at_once(fake) -> None:
    api, client, clock = fake
    a = _elector(client, clock, "a")
    a.tick()
    stored = api._store["leases"][(NS, NAME)]
    # Someone else (another candidate that judged the Lease expired) wrote it between a's renewals.
    api.put({**stored, "spec": lease_spec("z", 15, clock.wall(), stored["spec"])})
    clock.t += 2
    assert a.tick() is False  # fast-path PUT: 409; GET: z holds a fresh Lease
    assert a.last_error is None and a.holder == "z"
    assert _spec(api)["holderIdentity"] == "z" and _spec(api)["leaseTransitions"] == 1


def test_a_leader_that_cannot_renew_steps_down_after_the_renew_deadline(fake) -> None:
    api, client, clock = fake
    a = _elector(client, clock, "a")
    assert a.tick() is True
    api.fail("leases")
    clock.t += 5
    assert a.tick() is True and "500" in (a.last_error or "")  # within the 10 s renew deadline
    clock.t += 5
    assert a.tick() is False  # 10 s without a renewal: no longer acts as leader (the Lease lasts 15)
    api.heal()
    clock.t += 1
    assert a.tick() is True  # still the holder on record: renews without a transition
    assert _spec(api)["leaseTransitions"] == 0


def test_release_hands_over_within_a_second(fake) -> None:
    api, client, clock = fake
    a, b = _elector(client, clock, "a"), _elector(client, clock, "b")
    a.tick()
    b.tick()
    a.release()
    assert a.leading is False
    assert _spec(api)["holderIdentity"] == "" and _spec(api)["leaseDurationSeconds"] == 1
    assert b.tick() is True  # nobody holds it: no need to wait for it to expire
    assert _spec(api)["holderIdentity"] == "b" and _spec(api)["leaseTransitions"] == 1


def test_renew_deadline_must_be_below_the_lease_duration(fake) -> None:
    _, client, clock = fake
    with pytest.raises(ValueError, match="below the lease duration"):
        LeaseElector(client, NS, NAME, "a", lease_duration=10, renew_deadline=10)


def test_the_lease_namespace_follows_flag_then_downward_api_then_service_account(tmp_path) -> None:
    sa = tmp_path / "namespace"
    missing = tmp_path / "absent"
    assert lease_namespace("mine", {"POD_NAMESPACE": "pod-ns"}, sa) == "mine"
    assert lease_namespace(None, {"POD_NAMESPACE": "pod-ns"}, sa) == "pod-ns"
    sa.write_text("sa-ns\n")
    assert lease_namespace(None, {}, sa) == "sa-ns"
    assert lease_namespace(None, {}, missing) == "dra-webhook"


def test_candidates_on_one_host_have_distinct_identities() -> None:
    a, b = identity({"POD_NAME": "dra-webhook-7c9f-abcde"}), identity({"POD_NAME": "dra-webhook-7c9f-abcde"})
    assert a != b and a.startswith("dra-webhook-7c9f-abcde_") and b.startswith("dra-webhook-7c9f-abcde_")


def test_the_holder_writes_its_annotations_with_the_next_renewal_and_keeps_others(fake) -> None:
    """The compiled-policy reconciler publishes its last pass on its Lease this way (webhook.serve.reconciler)."""
    api, client, clock = fake
    api.put({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": NAME, "namespace": NS, "annotations": {"someone/else": "kept"}}, "spec": {}})
    a = _elector(client, clock, "a")
    assert a.tick()
    assert api._store["leases"][(NS, NAME)]["metadata"]["annotations"] == {"someone/else": "kept"}
    a.annotations = {"dra-migration.io/reconciled-objects": "4"}
    clock.t += 2
    assert a.tick()
    assert api._store["leases"][(NS, NAME)]["metadata"]["annotations"] == {
        "someone/else": "kept", "dra-migration.io/reconciled-objects": "4"}
    a.release()  # a released Lease still says what the last pass did
    stored = api._store["leases"][(NS, NAME)]
    assert stored["spec"]["holderIdentity"] == "" and \
        stored["metadata"]["annotations"]["dra-migration.io/reconciled-objects"] == "4"
