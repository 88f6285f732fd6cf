"""The compiled-policy reconciler (issue #28 item 2: stages follow the calendar), a process of its own.

CEL in admission has no clock, so ``compile`` writes each cohort's stage on one day into the objects. In the
compiled mode ``dra-webhook reconcile`` runs this alone, under its own ServiceAccount in its own Deployment that
serves nothing (deploy/compiled/reconciler.yaml; issue #47 item 4: the network-facing webhook Pods keep read-only
RBAC). Its replicas compete for their own Lease (``dra-webhook-compiled``); the holder compiles the last good
policy at now, server-side-applies every object under the field manager ``dra-webhook-reconciler``, and deletes
this policy's objects that are no longer compiled (``kube_apply.prune``).

Each pass also reads the installed webhook configurations and warns while their narrowing is not the one this
policy needs (``narrow.drift``): the reconciler never writes webhook configurations.

A pass runs again when the policy reloads (another last good policy object), just after midnight UTC of the
objects' ``valid_until`` (the next day a stage or an exception changes), and every ``period`` seconds anyway
(drift repair: someone edited or deleted an object). A failed pass is logged and retried with backoff (2 s,
doubling, at most ``period``); it never stops the process. Not leading: no writes at all, and the next leadership
starts with a pass.

What the last pass did is written as annotations on the Lease (``lease_annotations``) with the holder's next
renewal; the serving replicas' gauge writer reads them (``lease_samples``) and exports the compiled-mode metrics,
so no write right and no network port of the reconciler's is needed for them.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from webhook.compile import compile_admission
from webhook.compile.shared import Namespaces
from webhook.policy.compiled import CompiledPolicy

log = logging.getLogger("webhook.reconciler")

FIELD_MANAGER = "dra-webhook-reconciler"
LEASE_NAME = "dra-webhook-compiled"
PERIOD = 300.0  # seconds between drift repairs
FIRST_RETRY = 2.0  # seconds after a failed pass; doubles up to PERIOD
WAKE_AFTER_MIDNIGHT = dt.timedelta(seconds=1)


class Writer(Protocol):
    """Where the objects go: ``KubeWriter`` on a cluster, anything with these two calls in tests."""

    def apply(self, obj: dict[str, Any]) -> None: ...

    def prune(self, keep: list[dict[str, Any]], labels: dict[str, str]) -> list[str]: ...


class NotLeading(Exception):
    """The Lease was lost in the middle of a pass: stop writing."""


@dataclass(frozen=True, slots=True)
class Pass:
    """What the last successful pass did."""

    at: dt.datetime
    applied: list[str]  # ``Kind name``
    pruned: list[str]
    valid_until: dt.date | None
    next_at: dt.datetime
    narrowing: list[str] | None = field(default_factory=list)  # narrow.drift of the installed ones; None: unread


def wake_time(valid_until: dt.date | None, now: dt.datetime, period: float) -> dt.datetime:
    """The next pass: ``period`` after ``now``, or just after midnight UTC of ``valid_until`` if sooner (the
    objects compiled today enforce the old stage until then, and not a second longer than needed)."""
    periodic = now + dt.timedelta(seconds=period)
    if valid_until is None:
        return periodic
    return min(periodic, dt.datetime.combine(valid_until, dt.time(), dt.UTC) + WAKE_AFTER_MIDNIGHT)


class Reconciler:
    """Decides when a pass is due and runs it; ``tick`` is called about every second by the process loop."""

    def __init__(self, policy: Callable[[], CompiledPolicy | None], writer: Writer, *,
                 now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
                 namespaces: Callable[[], Namespaces | None] = lambda: None, period: float = PERIOD,
                 on_pass: Callable[[Pass], None] | None = None,
                 installed: Callable[[], list[dict[str, Any]]] = list) -> None:
        self._policy, self._writer, self._now = policy, writer, now
        self._namespaces, self.period, self._on_pass = namespaces, period, on_pass
        self._installed = installed
        self._reconciled: CompiledPolicy | None = None  # the policy of the last pass (failed or not)
        self._next: dt.datetime | None = None  # None: due now
        self.failures = 0
        self.last: Pass | None = None
        self._said: tuple[Any, ...] = ()  # what the last full log line listed

    def due(self, policy: CompiledPolicy, now: dt.datetime) -> bool:
        return policy is not self._reconciled or self._next is None or now >= self._next

    def tick(self, leading: Callable[[], bool]) -> bool:
        """Run a pass if one is due and we lead; returns whether one ran (failed passes included)."""
        if not leading():
            self._reconciled, self._next = None, None  # whoever leads next starts with a pass
            return False
        policy, now = self._policy(), self._now()
        if policy is None or not self.due(policy, now):
            return False
        self._reconciled = policy
        try:
            done = self._pass(policy, now, leading)
        except NotLeading:
            log.warning("compiled policies: lost the Lease during a pass; the new leader reconciles")
            self._reconciled, self._next = None, None
            return True
        except Exception as exc:  # ClusterError, a compile error: retried, never fatal
            self.failures += 1
            delay = min(FIRST_RETRY * 2 ** min(self.failures - 1, 20), self.period)
            self._next = now + dt.timedelta(seconds=delay)
            log.warning("compiled policies: reconciling policy %s failed (%s); retrying in %g s", policy.name,
                        str(exc)[:500], delay)
            return True
        self.failures, self._next, self.last = 0, done.next_at, done
        if self._on_pass is not None:
            self._on_pass(done)
        return True

    def _pass(self, policy: CompiledPolicy, now: dt.datetime, leading: Callable[[], bool]) -> Pass:
        compiled = compile_admission(policy, now, self._namespaces())
        applied = []
        for obj in compiled.objects:
            if not leading():
                raise NotLeading
            self._writer.apply(obj)
            applied.append(f"{obj['kind']} {obj['metadata']['name']}")
        if not leading():
            raise NotLeading
        pruned = self._writer.prune(compiled.objects, compiled.labels)
        next_at = wake_time(compiled.valid_until, now, self.period)
        until = compiled.valid_until.isoformat() if compiled.valid_until else "no date in the policy"
        said = (policy, applied, pruned)
        listed = ", ".join(applied) if said != self._said else "the same as before"
        self._said = (policy, applied, [])
        log.info("compiled policies: policy %s at %s: applied %d objects (%s); pruned %s; valid until %s; next "
                 "pass %s", policy.name, now.isoformat(timespec="seconds"), len(applied), listed,
                 ", ".join(pruned) or "nothing", until, next_at.isoformat(timespec="seconds"))
        return Pass(now, applied, pruned, compiled.valid_until, next_at, self._drift(policy))

    def _drift(self, policy: CompiledPolicy) -> list[str] | None:
        """``narrow.drift`` of the installed configurations, warned about on every pass while it lasts; None when
        they cannot be read (the metric then keeps its last value)."""
        from webhook.compile.narrow import drift

        try:
            problems = drift(self._installed(), policy)
        except Exception as exc:  # only a check: the objects are applied; the next pass reads again
            log.warning("compiled policies: cannot read the webhook configurations' narrowing (%s)", str(exc)[:300])
            return None
        for problem in problems:
            log.warning("compiled policies: the narrowed webhook configurations are stale: %s; the webhook may miss "
                        "what the compiled policies leave to it until they are narrowed for this policy (dra-webhook "
                        "compile --policy P --webhook-config FILE --narrow-webhooks; README \"Narrowed webhooks\")",
                        problem)
        return problems


WEBHOOK_CONFIGS = "dra-migration-webhook"
"""The Mutating/ValidatingWebhookConfiguration (deploy/base/webhooks.yaml, the chart's too) whose workloads
webhooks' namespaceSelectors the bindings copy."""


class KubeWriter:
    """``Writer`` over the API server: server-side apply (``kube_apply.apply``) and ``kube_apply.prune``; and the
    installed webhook configurations' namespaces (``namespaces``)."""

    def __init__(self, api: Any, manager: str = FIELD_MANAGER) -> None:
        self._api, self._manager = api, manager

    def configs(self) -> list[dict[str, Any]]:
        """The installed Validating/MutatingWebhookConfigurations ``WEBHOOK_CONFIGS`` (those there are)."""
        from webhook.cluster import apply as kube_apply

        base = "/apis/admissionregistration.k8s.io/v1"
        configs = [kube_apply.get(self._api, f"{base}/{plural}/{WEBHOOK_CONFIGS}")
                   for plural in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")]
        return [c for c in configs if c]

    def namespaces(self) -> Namespaces:
        """The namespaceSelectors of the installed workloads webhooks (an overlay's or a chart release's own), so
        the bindings judge the namespaces the webhook is sent (the shipped ones, logged, when the configurations
        are not installed); and the cluster's namespace names, so a binding leaves out those its policy does
        nothing in (``shared.skip_settled``). Read before every pass: an edited selector or a new namespace
        follows within ``PERIOD``."""
        from webhook.cluster import api as kube_api
        from webhook.compile.narrow import hook_namespaces

        try:
            hooks = hook_namespaces(self.configs())
        except ValueError as exc:
            log.warning("compiled policies: webhook configurations %s: %s; the bindings take the shipped "
                        "namespaceSelector", WEBHOOK_CONFIGS, exc)
            hooks = None
        try:
            existing = kube_api.namespace_names(self._api)
        except Exception as exc:  # only a saving: the stage-in-use matchConditions still skip those namespaces
            log.warning("compiled policies: cannot list namespaces (%s); no binding leaves out a settled namespace",
                        kube_api.describe_error(exc))
            existing = frozenset()
        return replace(hooks or Namespaces(), existing=existing)

    def apply(self, obj: dict[str, Any]) -> None:
        from webhook.cluster import apply as kube_apply

        kube_apply.apply(self._api, obj, self._manager)

    def prune(self, keep: list[dict[str, Any]], labels: dict[str, str]) -> list[str]:
        from webhook.cluster import apply as kube_apply

        return kube_apply.prune(self._api, keep, labels)


@dataclass(frozen=True)
class ReconcilerOptions:
    policy: Any  # Path of the policy files
    kubeconfig: str | None
    lease_namespace: str
    identity: str
    lease_name: str = LEASE_NAME
    period: float = PERIOD


def checked_policy(path: Any) -> Callable[[], CompiledPolicy | None]:
    """The last good policy of the files, re-checked (a stat) before each read: no polling thread here."""
    from webhook.policy.reload import PolicyStore

    store = PolicyStore(path)

    def current() -> CompiledPolicy | None:
        store.check()
        return store.current

    return current


ANNOTATION = "dra-migration.io/"
RECONCILED_AT = ANNOTATION + "reconciled-at"  # RFC 3339 start of the last successful pass
RECONCILED_OBJECTS = ANNOTATION + "reconciled-objects"  # how many objects it applied
NARROWING_STALE = ANNOTATION + "narrowing-stale"  # "true"/"false"; absent while the configurations were unread
RECONCILED_POLICY = ANNOTATION + "reconciled-policy"  # the policy's name


def lease_annotations(done: Pass, policy: str) -> dict[str, str]:
    """What the Lease says of the last successful pass (pure)."""
    out = {RECONCILED_AT: done.at.astimezone(dt.UTC).isoformat(timespec="seconds"),
           RECONCILED_OBJECTS: str(len(done.applied)), RECONCILED_POLICY: policy}
    if done.narrowing is not None:
        out[NARROWING_STALE] = "true" if done.narrowing else "false"
    return out


Sample = tuple[str, dict[str, str], float]


def lease_samples(lease: dict[str, Any] | None) -> list[Sample]:
    """The compiled-mode gauges from the reconciler's Lease (pure): the last pass's time and objects whenever a pass
    is recorded (a reconciler that stopped keeps its last time, so the staleness alert fires), the narrowing only
    while someone holds the Lease. Nothing for a missing Lease or one no pass annotated; a malformed value is
    left out."""
    meta = (lease or {}).get("metadata") or {}
    notes = meta.get("annotations") or {}
    out: list[Sample] = []
    try:
        at = dt.datetime.fromisoformat(str(notes[RECONCILED_AT]))
        out.append(("dra_webhook_compiled_policies_reconciled_timestamp_seconds", {}, at.timestamp()))
        out.append(("dra_webhook_compiled_policies_objects", {}, float(int(notes[RECONCILED_OBJECTS]))))
    except (KeyError, ValueError):
        return []
    held = bool(((lease or {}).get("spec") or {}).get("holderIdentity"))
    if held and notes.get(NARROWING_STALE) in ("true", "false"):
        out.append(("dra_webhook_compiled_narrowing_stale", {}, 1.0 if notes[NARROWING_STALE] == "true" else 0.0))
    return out


def read_lease(api: Any, namespace: str, name: str = LEASE_NAME) -> dict[str, Any] | None:
    """The reconciler's Lease (None when there is none: not the compiled mode)."""
    from webhook.cluster import apply as kube_apply

    return kube_apply.get(api, f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")


def run(opts: ReconcilerOptions, stop: threading.Event) -> None:
    """The reconciler process: elect on a thread (every retry period), reconcile on this one while leading;
    each pass's result goes onto the Lease with the next renewal; release the Lease when stopped."""
    from webhook.cluster import api as kube_api
    from webhook.cluster.leader import LeaseElector, campaign

    api = kube_api.connect(opts.kubeconfig)
    elector = LeaseElector(api, opts.lease_namespace, opts.lease_name, opts.identity)
    log.info("compiled-policy reconciler pid %d: candidate %s for Lease %s/%s", os.getpid(), opts.identity,
             opts.lease_namespace, opts.lease_name)
    thread = campaign(elector, stop)
    writer = KubeWriter(api)
    policy = checked_policy(opts.policy)

    def record(done: Pass) -> None:
        current = policy()
        elector.annotations = lease_annotations(done, current.name if current else "")

    reconciler = Reconciler(policy, writer, namespaces=writer.namespaces, period=opts.period,
                            on_pass=record, installed=writer.configs)
    while not stop.is_set():
        reconciler.tick(lambda: elector.leading)
        stop.wait(1.0)
    thread.join(10)
    elector.release()
