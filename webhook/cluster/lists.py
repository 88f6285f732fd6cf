"""Bulk reads of the cluster in bounded memory: paged lists, each page reduced as it arrives.

``stream(api, resource)`` lists Pods, ResourceClaims, ResourceSlices, Namespaces or DeviceClasses page by
page (``limit`` + ``continue``), decodes each page with orjson from the raw body (no model round trip) and
yields its items one at a time, through ``project`` when given (a projection returning None drops the item).
A page is released before the next one is requested, so a command that keeps only what it outputs
(``report``'s rows, ``preflight``'s hit claims and their Pods, the gauges' counts) holds one page of
objects at a time, never the cluster.

Which cache answers: every request leaves ``resourceVersion`` unset, a consistent read. On 1.36 the API
server serves it from its watch cache, the first page and the ``continue`` pages alike:
staging/src/k8s.io/apiserver/pkg/storage/cacher/delegator/interface.go ``ShouldDelegateList`` sends a
``ResourceVersionQuorum`` read to ``ShouldDelegateConsistentRead`` (ConsistentListFromCache, GA in 1.34) and
a continue token to ``(*Cacher).ShouldDelegateContinue`` (cacher.go), which answers from a cache snapshot
at the token's revision (ListFromCacheSnapshot, beta and on since 1.34, pkg/features/kube_features.go).
``resourceVersion=0`` would add nothing on 1.36 but staleness, and on servers before 1.34 the watch cache
ignores ``limit`` for it and sends the whole list in one response: the memory this module exists to avoid.

A continue token outlives neither etcd compaction nor a snapshot (about five minutes): the API server then
answers 410 Expired. Consumers of a stream have already counted the earlier pages, so resuming with the
inconsistent token the 410 carries would mix two points in time; ``ListExpired`` is raised instead and
``rerun`` repeats the whole read (re-list), as client-go's pager does with ``FullListIfExpired``.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import orjson
from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("webhook.kube_lists")

# A page of 250 realistic Pods (about 12 KB each with managedFields) is 3 MB of JSON and 16 MB parsed;
# 500 doubles that for no gain a person notices (measured in-process; kubectl pages by 500).
PAGE_SIZE = 250
T = TypeVar("T")
R = TypeVar("R")

#: Called after each page: (resource, items read so far, items left or None when the server does not say).
OnPage = Callable[[str, int, int | None], None]

# resource -> (API class, list over all namespaces / cluster-scoped, namespaced list or None)
_LISTS: dict[str, tuple[type[Any], str, str | None]] = {
    "namespaces": (client.CoreV1Api, "list_namespace", None),
    "pods": (client.CoreV1Api, "list_pod_for_all_namespaces", "list_namespaced_pod"),
    "resourceclaims": (client.ResourceV1Api, "list_resource_claim_for_all_namespaces",
                       "list_namespaced_resource_claim"),
    "resourceslices": (client.ResourceV1Api, "list_resource_slice", None),
    "deviceclasses": (client.ResourceV1Api, "list_device_class", None),
    "resourceclaimtemplates": (client.ResourceV1Api, "list_resource_claim_template_for_all_namespaces",
                               "list_namespaced_resource_claim_template"),
}


class ListExpired(RuntimeError):
    """A list's continue token expired (HTTP 410) half-way: the read must start again (``rerun``)."""


def list_call(api: client.ApiClient, resource: str, namespace: str | None = None) -> Callable[..., Any]:
    """The generated list method for ``resource`` (in ``namespace``, or over all namespaces): for ``pages``, and
    for watches (``webhook.cluster.informer``)."""
    api_class, name, namespaced_name = _LISTS[resource]
    if namespace:
        if namespaced_name is None:
            raise ValueError(f"{resource} are not namespaced")
        name = namespaced_name
    call: Callable[..., Any] = getattr(api_class(api), name)
    return call


def _page(call: Callable[..., Any], args: tuple[Any, ...], token: str | None,
          timeout: float | tuple[float, float] | None, params: dict[str, Any]) -> dict[str, Any]:
    resp = call(*args, limit=PAGE_SIZE, _continue=token, _request_timeout=timeout, _preload_content=False,
                **params)
    try:
        body = orjson.loads(resp.data)
    finally:
        resp.release_conn()
    if not isinstance(body, dict):
        raise ValueError(f"the API server answered a list with a JSON {type(body).__name__}, expected an object")
    return body


def pages(
    call: Callable[..., Any],
    *args: Any,
    timeout: float | tuple[float, float] | None = (5.0, 60.0),
    what: str = "objects",
    pace: Pacer | None = None,
    **params: Any,
) -> Iterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """The one page loop: ``(items, list metadata)`` of each page of the generated list method ``call``.

    Each page is requested only when the previous one has been consumed, so a consumer that reduces the items
    before asking for more holds one page; with ``pace``, after a rest the pacer decides (``webhook.cluster.lists``).
    Raises ``ListExpired`` when a continue token expires (``what`` names
    the objects in its message), ``ApiException`` for other API errors.
    """
    token: str | None = None
    read = 0
    while True:
        if pace is not None:
            pace.before_page(first=token is None)
        try:
            page = _page(call, args, token, timeout, params)
        except ApiException as exc:
            if exc.status == 410 and token:
                raise ListExpired(f"the list of {what} expired after {read} objects (HTTP 410): "
                                  "its continue token outlived the API server's history") from None
            raise
        items = page.get("items") or []
        meta = page.get("metadata") or {}
        del page
        token = meta.get("continue") or None
        read += len(items)
        yield items, meta
        del items
        if not token:
            return


def stream(
    api: client.ApiClient,
    resource: str,
    namespace: str | None = None,
    project: Callable[[dict[str, Any]], T | None] | None = None,
    on_page: OnPage | None = None,
    timeout: float | tuple[float, float] | None = (5.0, 60.0),
    pace: Pacer | None = None,
) -> Iterator[T]:
    """Every object of ``resource`` (in ``namespace``, or all), page by page, through ``project``; with
    ``pace``, resting between pages (``webhook.cluster.lists``).

    Raises ``ListExpired`` when a continue token expires, ``ApiException`` for other API errors.
    """
    call = list_call(api, resource, namespace)
    args = (namespace,) if namespace else ()
    read = 0
    for items, meta in pages(call, *args, timeout=timeout, what=resource, pace=pace):
        read += len(items)
        if on_page is not None:
            remaining = meta.get("remainingItemCount")
            more = bool(meta.get("continue"))
            on_page(resource, read, remaining if isinstance(remaining, int) else (None if more else 0))
        for item in items:
            value: Any = item if project is None else project(item)
            if value is not None:
                yield value
        del items


def stream_custom(api: client.ApiClient, group: str, version: str, plural: str, namespace: str | None = None,
                  on_page: OnPage | None = None) -> Iterator[dict[str, Any]]:
    """Every object of ``group/version/plural`` (a built-in workload group such as apps or batch, or a CRD's), page
    by page as ``stream`` does, through the generic custom-object paths (``/apis/<group>/<version>/...``).

    Raises ``ApiException`` (404 when the API server does not serve the resource), ``ListExpired``."""
    objects = client.CustomObjectsApi(api)
    call: Callable[..., Any] = objects.list_cluster_custom_object
    args: tuple[str, ...] = (group, version, plural)
    if namespace:
        call, args = objects.list_namespaced_custom_object, (group, version, namespace, plural)
    read = 0
    for items, meta in pages(call, *args, what=plural):
        read += len(items)
        if on_page is not None:
            on_page(plural, read, None if meta.get("continue") else 0)
        yield from items
        del items


def device_classes(api: client.ApiClient, on_page: OnPage | None = None,
                   pace: Pacer | None = None) -> list[dict[str, Any]] | None:
    """Every DeviceClass (a few dozen: kept whole), or None when resource.k8s.io/v1 is not served (404)."""
    try:
        return list(stream(api, "deviceclasses", on_page=on_page, pace=pace))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def rerun(read: Callable[[], R], attempts: int = 3) -> R:
    """``read()`` again from the start when one of its lists expired half-way, at most ``attempts`` times."""
    for _ in range(attempts - 1):
        try:
            return read()
        except ListExpired as exc:
            log.info("%s: reading again from the start", exc)
    return read()


@contextlib.contextmanager
def startup_heap_frozen() -> Iterator[None]:
    """For one-shot commands, around a long read: keep what exists at the start (modules, the client's ~50,000
    model objects) out of the cyclic garbage collector's sight. Every page allocates tens of thousands of
    short-lived containers, and the full collections they trigger would walk that startup heap each time:
    12% of ``report``'s CPU over 50,000 streamed Pods, measured in-process (Python 3.11)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


# --- Pacing of bulk reads
#
# Pacing of a bulk read: bound the share of wall time a paged list keeps the CPU busy (issue 29).
#
# The gauge writer lists every Pod of the cluster when it takes the Lease (and again only when its watch falls
# behind the API server's history; ``webhook.fleet.gauge_watch``). Unpaced, each page is requested as soon as the
# previous one is kept, so for the whole list the API server encodes JSON and the writer decodes it back to back,
# on the same cores as (in this bench, and on a small control-plane node) the replica's admission workers:
# admission's median did not move during a read, its p99 tripled at 25,000 Pods.
# A ``Pacer`` sleeps between pages for as long as the previous page kept the read busy, scaled so the read is
# busy at most ``share`` of the time: after a page that took ``t`` seconds (request, decode, count), it waits
# ``t * (1 - share) / share``. With the default share of 0.5 a read takes twice as long and the API server and
# writer work in bursts of one page (250 objects) with equal rests between them.
#
# One limit keeps pacing from costing the read itself: a continue token expires with the API server's history
# (HTTP 410, about five minutes; ``kube_lists.ListExpired``), so the pauses within one list stop once that list
# has been running for ``list_budget`` seconds, and the rest of it is read at full speed. A 410 still makes the
# caller list again (``kube_lists.rerun``, ``webhook.cluster.informer.Informer.run``) with a fresh pacer.

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
