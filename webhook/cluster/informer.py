"""One resource's list+watch cache (all namespaces): the store, its resourceVersion, and the loop that keeps it.

The live cluster view (``webhook.cluster.live_view``) runs one ``Informer`` per watched resource, each in its own
thread; rules never call it. What is stored per object is the informer's ``keep`` projection (labels only for
Namespaces, parsed devices for ResourceSlices), never more than the view needs; an object ``keep`` answers None
for is not stored at all (the gauge writer's Pod projection drops Pods that use no devices).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import watch
from urllib3.exceptions import ReadTimeoutError

from webhook.cluster.api import ApiException, describe_error
from webhook.cluster.lists import ListExpired, Pacer, pages

log = logging.getLogger("webhook.informer")

WATCH_SILENCE = 150.0
"""Seconds a watch may stay without a byte before it is taken for a dead connection and opened again from its
resourceVersion. The API server's watch cache sends every watcher a bookmark about once a minute
(staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go, ``defaultBookmarkFrequency``, v1.36), and this
client, on HTTP/1.1, has no pings to notice a lost route: without this limit a silent watch would be trusted
until its own timeout (5-7.5 minutes)."""


def name_key(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def namespaced_name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class Informer:
    """List+watch state of one resource (all namespaces): objects by ``key``, resourceVersion, sync flags."""

    def __init__(self, name: str, list_fn: Callable[..., Any], keep: Callable[[dict[str, Any]], Any],
                 key: Callable[[dict[str, Any]], str] = name_key) -> None:
        self.name = name
        self.list_fn = list_fn
        self.keep = keep  # what to store per object (labels only for namespaces)
        self.key = key  # the name; namespace/name for a namespaced resource
        self.lock = threading.Lock()
        self.store: dict[str, Any] = {}
        self.rv: str | None = None
        self.synced = False
        self.watching = False
        self.version = 0  # bumped on every change of a kept value, for snapshots
        self.relists = 0
        self.expired = 0
        self.errors = 0
        self.last_error: str | None = None
        self.watch = watch.Watch(return_type="object")  # "object": events stay raw dicts
        self.thread: threading.Thread | None = None
        self.changed: Callable[[], None] | None = None  # called (in the watch thread) after each change
        self.pace: Callable[[], Pacer] | None = None  # a fresh pacer for each (re)list (lists.Pacer); None: unpaced
        self.silence = WATCH_SILENCE  # a watch without a byte for this long is opened again
        self.reopened = 0  # watches opened again after that silence

    def replace(self, items: list[dict[str, Any]], rv: str) -> None:
        kept = ((self.key(o), self.keep(o)) for o in items)
        self._install({k: v for k, v in kept if v is not None}, rv)

    def relist(self, stop: threading.Event | None = None) -> bool:
        """List everything again, page by page, each object through ``keep`` as its page arrives: one page of
        whole objects in memory at a time (20,000 devices listed whole cost the device process a 173 MB
        high-water mark, bench/results.md), then the new store replaces the old in one step.

        ``stop`` set between pages abandons the list (False): a gauge writer that lost its Lease during a
        minutes-long paced list of 100,000 Pods neither finishes it nor keeps what it read."""
        store: dict[str, Any] = {}
        rv = ""
        pace = self.pace() if self.pace is not None else None
        for items, meta in pages(self.list_fn, timeout=(5.0, 60.0), what=self.name, pace=pace):
            if stop is not None and stop.is_set():
                return False
            for obj in items:
                kept = self.keep(obj)
                if kept is not None:
                    store[self.key(obj)] = kept
            rv = meta.get("resourceVersion", "")
            del items
            if stop is not None and stop.is_set():
                return False
        self._install(store, rv)
        return True

    def _install(self, store: dict[str, Any], rv: str) -> None:
        with self.lock:
            self.store = store
            self.rv = rv
            self.synced = True
            self.version += 1
            self.relists += 1
        if self.changed is not None:
            self.changed()

    def apply(self, type_: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        with self.lock:
            if type_ in ("ADDED", "MODIFIED"):
                key, kept = self.key(obj), self.keep(obj)
                if self.store.get(key) != kept:  # an HPA's status churn keeps the same
                    self.version += 1
                if kept is None:
                    self.store.pop(key, None)  # nothing to keep (any more): not stored
                else:
                    self.store[key] = kept
            elif type_ == "DELETED":
                self.store.pop(self.key(obj), None)
                self.version += 1
            if meta.get("resourceVersion"):
                self.rv = meta["resourceVersion"]
        if self.changed is not None and type_ in ("ADDED", "MODIFIED", "DELETED"):
            self.changed()

    def status(self) -> dict[str, Any]:
        with self.lock:
            return {
                "synced": self.synced,
                "watching": self.watching,
                "resourceVersion": self.rv,
                "objects": len(self.store),
                "relists": self.relists,
                "reopened": self.reopened,
                "expired": self.expired,
                "errors": self.errors,
                "lastError": self.last_error,
            }


    # -- list + watch loop (runs in this informer's own thread) -----------------------------------------

    def run(self, stop: threading.Event, backoff: tuple[float, float], watch_timeout: int,
            note_error: Callable[[str], None]) -> None:
        """List, then watch from the list's resourceVersion, until ``stop``; relist on 410, back off on errors.

        The store is kept through errors: a view that lost its connection answers from what it last saw.
        """
        delay = backoff[0]
        expired_in_a_row = 0
        while not stop.is_set():
            try:
                if self.rv is None and not self.relist(stop):
                    break
                if stop.is_set():
                    break
                started = time.monotonic()
                events = self._watch_once(stop, watch_timeout)
                expired_in_a_row = 0
                if events or time.monotonic() - started > 1.0:
                    delay = backoff[0]
                    continue
                # A watch that ends at once with nothing in it (a proxy cutting streams?): do not spin.
            except ReadTimeoutError:
                # Silent for ``silence`` seconds: a lost route, or a server without bookmarks. Watch again from
                # the same resourceVersion at once; if the server is gone, that fails and is reported.
                with self.lock:
                    self.reopened += 1
                log.info("watch of %s silent for %.0f s: opening it again", self.name, self.silence)
                continue
            except (ApiException, ListExpired) as exc:
                if isinstance(exc, ListExpired) or exc.status == 410:
                    # Our resourceVersion (or a list's continue token) is too old for the server: list again.
                    # Back off only if that keeps happening (a server that answers 410 to a fresh list's version).
                    with self.lock:
                        self.rv = None
                        self.expired += 1
                    expired_in_a_row += 1
                    if expired_in_a_row == 1:
                        continue
                else:
                    self._watch_failed(exc, note_error)
            except Exception as exc:  # connection refused, timeouts, bad JSON: keep the cache, retry later
                if stop.is_set():
                    break
                self._watch_failed(exc, note_error)
            finally:
                self.watching = False
            # Exponential backoff with jitter, so many workers do not retry in step.
            stop.wait(random.uniform(delay / 2, delay))
            delay = min(delay * 2, backoff[1])

    def _watch_once(self, stop: threading.Event, watch_timeout: int) -> int:
        """One watch request from ``self.rv`` until the server ends it; 410 and errors raise.

        Returns the number of events received.
        """
        timeout = int(watch_timeout * (1 + random.random() / 2))
        stream = self.watch.stream(
            self.list_fn,
            resource_version=self.rv,
            timeout_seconds=timeout,
            allow_watch_bookmarks=True,
            _request_timeout=(5.0, min(timeout + 30.0, self.silence)),
        )
        self.watching = True
        events = 0
        for event in stream:
            if stop.is_set():
                break
            self.apply(event["type"], event["raw_object"])
            events += 1
        return events

    def _watch_failed(self, exc: BaseException, note_error: Callable[[str], None]) -> None:
        text = describe_error(exc)
        with self.lock:
            self.errors += 1
            self.last_error = text
        note_error(f"{self.name}: {text}")
        log.warning("watch of %s failed, retrying with backoff: %s", self.name, text)

def keep_labels(ns: dict[str, Any]) -> dict[str, str]:
    return dict((ns.get("metadata") or {}).get("labels") or {})


def keep_whole(obj: dict[str, Any]) -> dict[str, Any]:
    return obj
