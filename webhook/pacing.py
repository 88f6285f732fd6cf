"""Pacing of a bulk read: bound the share of wall time a paged list keeps the CPU busy (issue 29).

The gauge writer lists every Pod of the cluster when it takes the Lease (and again only when its watch falls
behind the API server's history; ``webhook.gauge_watch``). Unpaced, each page is requested as soon as the
previous one is kept, so for the whole list the API server encodes JSON and the writer decodes it back to back,
on the same cores as (in this bench, and on a small control-plane node) the replica's admission workers:
admission's median did not move during a read, its p99 tripled at 25,000 Pods.
A ``Pacer`` sleeps between pages for as long as the previous page kept the read busy, scaled so the read is
busy at most ``share`` of the time: after a page that took ``t`` seconds (request, decode, count), it waits
``t * (1 - share) / share``. With the default share of 0.5 a read takes twice as long and the API server and
writer work in bursts of one page (250 objects) with equal rests between them.

One limit keeps pacing from costing the read itself: a continue token expires with the API server's history
(HTTP 410, about five minutes; ``kube_lists.ListExpired``), so the pauses within one list stop once that list
has been running for ``list_budget`` seconds, and the rest of it is read at full speed. A 410 still makes the
caller list again (``kube_lists.rerun``, ``webhook.informer.Informer.run``) with a fresh pacer.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEFAULT_SHARE = 0.5
DEFAULT_LIST_BUDGET = 150.0  # seconds of one list after which it is no longer paced (tokens last ~300 s)


class Pacer:
    """Sleeps between the pages of one read (every list of it), so the read is busy at most ``share`` of the
    time. ``clock`` and ``sleep`` are injectable for tests; ``paused`` is the total time slept."""

    def __init__(self, share: float = DEFAULT_SHARE, list_budget: float = DEFAULT_LIST_BUDGET,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"pacing share must be in (0, 1], got {share}")
        self.share = share
        self.list_budget = list_budget
        self.paused = 0.0
        self._clock = clock
        self._sleep = sleep
        self._busy_since: float | None = None  # when the work on the previous page began
        self._list_began = 0.0

    def before_page(self, first: bool) -> None:
        """Call before requesting a page (``first``: the first page of a list). Rests for the previous page of
        this read, if any, then starts timing this one."""
        now = self._clock()
        if self._busy_since is not None and self.share < 1:
            pause = (now - self._busy_since) * (1 - self.share) / self.share
            if not first:
                pause = min(pause, max(0.0, self._list_began + self.list_budget - now))
            if pause > 0:
                self._sleep(pause)
                self.paused += pause
        self._busy_since = self._clock()
        if first:
            self._list_began = self._busy_since
