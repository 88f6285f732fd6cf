"""The worker's large slots (issue 47 item 1): at most ``MAX_LARGE`` requests past ``LARGE`` bytes are held in a
worker's memory at once; the others are not read further until a slot frees, oldest first, and small requests never
wait. The event loop itself runs on the real server in tests/processes/test_hostile_input.py."""

from __future__ import annotations

from typing import Any

from webhook.serve import worker
from webhook.serve.worker import MAX_LARGE, AdmissionWorker, Reading


class Poller:
    def __init__(self) -> None:
        self.registered: set[Any] = set()

    def register(self, sock: Any, events: int, callback: Any) -> None:
        self.registered.add(sock)

    def unregister(self, sock: Any) -> None:
        self.registered.remove(sock)


class Conn:
    def __init__(self) -> None:
        self.sock = object()


def _worker() -> Any:
    w = AdmissionWorker.__new__(AdmissionWorker)  # the slot bookkeeping only: no sockets, no gunicorn config
    w.poller, w.large_conns, w.paused, w.reading = Poller(), set(), [], {}
    w.resumed = []
    w._on_ready = lambda state, _sock: w.resumed.append(state)
    return w


def _reading(w: Any) -> Reading:
    state = Reading(Conn(), deadline=0.0, buf=bytearray(), handshaking=False)  # type: ignore[arg-type]
    w.reading[id(state.conn)] = state
    w.poller.registered.add(state.conn.sock)
    return state


def test_at_most_max_large_are_held_and_the_rest_wait_oldest_first():
    w = _worker()
    held = [_reading(w) for _ in range(MAX_LARGE)]
    assert all(w._take_large(s) for s in held)
    waiting = [_reading(w) for _ in range(3)]
    assert not any(w._take_large(s) for s in waiting)
    assert [s.paused for s in waiting] == [True] * 3 and w.paused == waiting
    assert not any(s.conn.sock in w.poller.registered for s in waiting)  # not read while paused
    assert len(w.large_conns) == MAX_LARGE

    w._release_large(held[0].conn)  # answered: the oldest waiting one gets the slot and is read again
    assert w.resumed == [waiting[0]] and waiting[0].large and not waiting[0].paused
    assert waiting[0].conn.sock in w.poller.registered and w.paused == waiting[1:]
    assert len(w.large_conns) == MAX_LARGE


def test_a_paused_connection_closed_leaves_the_queue_and_a_closed_slot_is_freed():
    w = _worker()
    held = [_reading(w) for _ in range(MAX_LARGE)]
    for s in held:
        w._take_large(s)
    late = _reading(w)
    assert not w._take_large(late)
    w._forget(late)  # its deadline passed: dropped while waiting
    assert w.paused == [] and not late.paused
    w._release_large(held[1].conn)
    assert w.resumed == [] and len(w.large_conns) == MAX_LARGE - 1
    w._release_large(held[1].conn)  # twice (dropped, then its request finished): no effect
    assert len(w.large_conns) == MAX_LARGE - 1


def test_the_limits_leave_small_requests_alone():
    assert worker.LARGE >= 64 * 1024  # a Pod review is a few KiB: never near a slot
    assert worker.LARGE < worker.MAX_BUFFERED_BODY
