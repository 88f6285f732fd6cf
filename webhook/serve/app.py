"""Flask app factory: HTTP in, AdmissionReview out.

Every answer is JSON. A body that is not an AdmissionReview gets a 4xx with a JSON error; anything that
parses as a review gets HTTP 200 with a well-formed AdmissionReview, even when something inside failed,
because a non-2xx lets ``failurePolicy: Ignore`` wave the request through (docs/webhook-conventions.md §1.3).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from webhook.admission import answer as admission
from webhook.admission import budget, engine, review
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Action
from webhook.rules.ruleset import RuleSet
from webhook.rules.view import ClusterView, OfflineView
from webhook.serve import fast_path, memory, metrics


class Recorder(Protocol):
    """What ``serve --record`` hands each answered review to (``recording.Recorder``)."""

    def __call__(self, body: dict[str, Any], endpoint: str, response: dict[str, Any], policy: str) -> None: ...


log = logging.getLogger("webhook.app")

MAX_BODY = budget.MAX_BODY  # two 3 MiB objects plus the envelope (docs/webhook-conventions.md §1.1)


class PolicySource(Protocol):
    @property
    def current(self) -> CompiledPolicy | None: ...

    @property
    def error(self) -> str | None: ...


class CertState(Protocol):
    @property
    def loaded(self) -> bool: ...

    @property
    def error(self) -> str | None: ...

    @property
    def not_after(self) -> dt.datetime | None: ...


class StaticPolicy:
    """A fixed policy (tests, ``check``): never reloads."""

    def __init__(self, policy: CompiledPolicy | None, error: str | None = None) -> None:
        self.current = policy
        self.error = error


def _json(body: Any, status: int = 200) -> Response:
    return _raw(orjson.dumps(body), status)


def _raw(data: bytes, status: int = 200) -> Response:
    return Response(data, status=status, mimetype="application/json")


def _read_body() -> bytes:
    """The request body; over MAX_BODY it is refused with 413 before more than MAX_BODY + 1 bytes are read.

    With a Content-Length werkzeug refuses up front (MAX_CONTENT_LENGTH). A chunked body has no length,
    and werkzeug's limited stream then stops silently at the limit, so the truncated body would be parsed
    (a misleading 400); read one byte past the limit from the raw input instead and refuse if it is there.
    """
    if request.content_length is not None:
        return request.get_data(cache=False)
    body: bytes = request.environ["wsgi.input"].read(MAX_BODY + 1)  # WSGI (PEP 3333): read() gives bytes
    if len(body) > MAX_BODY:
        raise RequestEntityTooLarge()
    return body


def create_app(
    policies: PolicySource,
    view: ClusterView | None = None,
    cert: CertState | None = None,
    clock: Callable[[], dt.datetime] | None = None,
    recorder: Recorder | None = None,
    rules: RuleSet | None = None,
    large: Large | None = None,
) -> Flask:
    """Build the app around a policy source, a cluster view and (when serving TLS) the certificate state;
    ``rules`` is what the engine runs (default: the standard set); ``large`` how reviews over the replica's
    per-thread share are answered (default: as they come, for tests and a single process)."""
    app = Flask("dra-webhook")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    view = view or OfflineView()
    now = clock or (lambda: dt.datetime.now(dt.UTC))
    answer = Answerer(policies, view, now, recorder, engine.handled_kinds(rules), rules, large or Large())
    _add_admission_routes(app, answer)
    _add_probes(app, policies, view, cert, now)
    _add_error_handlers(app)
    app.wsgi_app = fast_path.wrap(app.wsgi_app, answer, MAX_BODY)  # type: ignore[method-assign]
    return app


@dataclass(frozen=True, slots=True)
class Large:
    """Reviews over ``body`` bytes are answered inside ``one_at_a_time()`` and the heap trimmed after them
    (``webhook.serve.memory``: the replica's budget per request)."""

    body: int = MAX_BODY
    one_at_a_time: Callable[[], AbstractContextManager[Any]] = nullcontext


@dataclass(frozen=True, slots=True)
class Answerer:
    """Status and JSON bytes for one admission POST: the one answer the flask view and the fast path share."""

    policies: PolicySource
    view: ClusterView
    now: Callable[[], dt.datetime]
    recorder: Recorder | None
    known_kinds: frozenset[str]
    rules: RuleSet | None = None
    large: Large = Large()

    def __call__(self, phase: str, mimetype: str, body: bytes) -> tuple[int, bytes]:
        if len(body) <= self.large.body:
            return self._answer(phase, mimetype, body)
        with self.large.one_at_a_time():
            try:
                return self._answer(phase, mimetype, body)
            finally:
                memory.trim()  # the parsed review is gone: hand its heap back to the kernel

    def _answer(self, phase: str, mimetype: str, body: bytes) -> tuple[int, bytes]:
        started = time.perf_counter()
        endpoint = "/" + phase
        if mimetype != "application/json":
            metrics.bad_requests("415").inc()
            return 415, orjson.dumps({"error": f"Content-Type is {mimetype or 'missing'!r}, expected "
                                               "'application/json' (an AdmissionReview)", "status": 415})
        try:
            doc = review.load(body)
            req = review.from_document(doc)
        except review.EnvelopeError as exc:
            metrics.bad_requests(str(exc.status)).inc()
            log.warning("%s: rejected body (%d bytes): %s", endpoint, len(body), exc.log_message)
            return exc.status, orjson.dumps({"error": exc.message, "status": exc.status})
        except review.RequestError as exc:
            metrics.bad_requests(str(exc.code)).inc()
            log.warning("%s uid=%s: %s: %s", endpoint, review.loggable(exc.uid), exc.what, exc.log_message)
            return 200, admission.malformed(exc).body()
        policy = self.policies.current
        answer = admission.handle(req, phase, policy, self.view, self.now(), policy_error=self.policies.error,
                                rules=self.rules)
        if policy is not None:
            _observe(req, answer, policy, phase)
        kind = req.kind if req.kind in self.known_kinds else "other"  # bounded label values, whatever is posted
        metrics.requests(endpoint, kind, req.operation, str(answer.allowed).lower()).inc()
        metrics.duration(endpoint).observe(time.perf_counter() - started)
        wire = answer.review()
        data = orjson.dumps(wire)
        if self.recorder is not None:  # last: it redacts the parsed review in place instead of parsing it again
            sent = {**wire["response"], "patch": answer.patch} if answer.patch else wire["response"]
            self.recorder(doc, endpoint, sent, policy.identity if policy is not None else "")
        return 200, data


def _observe(req: review.AdmissionRequest, answer: admission.AdmissionResponse, policy: CompiledPolicy,
             phase: str) -> None:
    """Metrics and a log line for one answered review."""
    for v in answer.verdicts:
        if v.failed:
            metrics.rule_errors(v.rule).inc()
        else:
            metrics.findings(v.rule, v.action.value).inc()
    if phase == "mutate" and answer.mutated is not None and req.operation == "CREATE":
        annotations = (answer.mutated.get("metadata") or {}).get("annotations") or {}
        path = annotations.get(policy.key("path"))
        if path:
            metrics.workloads(path, answer.stage, answer.cohort or "none").inc()
    # Denials and warnings are news at INFO; routine patches and audit-only findings go to DEBUG (the
    # log handler's lock is measurable at a few thousand requests a second, see bench/results.md).
    loud = any(v.action in (Action.Deny, Action.Warn) for v in answer.verdicts)
    if loud or ((answer.verdicts or answer.patch) and log.isEnabledFor(logging.DEBUG)):
        log.log(
            logging.INFO if loud else logging.DEBUG,
            "%s uid=%s %s %s %s/%s allowed=%s findings=%s patch_ops=%d%s",
            phase, *map(review.loggable, (req.uid, req.operation, req.kind, req.namespace, req.name or "<generated>")),
            answer.allowed, ",".join(f"{v.rule}:{v.action.value}" for v in answer.verdicts) or "-",
            len(answer.patch), " dryRun" if req.dry_run else "",
        )


def _add_admission_routes(app: Flask, answer: fast_path.Answer) -> None:
    """POST /mutate and /validate through flask: what the fast path leaves (chunked bodies, no length)."""

    def admit(phase: str) -> Response:
        # A wrong Content-Type is refused before the body is read, as before the fast path existed.
        body = _read_body() if request.mimetype == "application/json" else b""
        status, data = answer(phase, request.mimetype, body)
        return _raw(data, status)

    @app.post("/mutate")
    def mutate() -> Response:
        return admit("mutate")

    @app.post("/validate")
    def validate() -> Response:
        return admit("validate")


def _add_probes(app: Flask, policies: PolicySource, view: ClusterView, cert: CertState | None,
                now: Callable[[], dt.datetime]) -> None:
    """GET /healthz (the process answers), /readyz (a policy and a valid certificate are loaded), /metrics."""

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        problems = []
        policy = policies.current
        if policy is None:
            problems.append(f"no valid policy loaded: {policies.error or 'not loaded yet'}")
        if cert is not None and not cert.loaded:
            problems.append(f"no valid serving certificate loaded: {cert.error or 'not loaded yet'}")
        elif cert is not None and cert.not_after is not None and cert.not_after <= now():
            problems.append(f"the serving certificate expired at {cert.not_after.isoformat()}")
        body: dict[str, Any] = {
            "ready": not problems,
            "policy": policy.identity if policy else None,
            "policyError": policies.error,
            "cluster": _view_status(view),
        }
        if problems:
            body["problems"] = problems
        return _json(body, 200 if not problems else 503)

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        data, content_type = metrics.render()
        return Response(data, status=200, content_type=content_type)


def _view_status(view: ClusterView) -> dict[str, Any]:
    """The cluster view's sync state for /readyz, which never depends on it (issue 24 item 5): an unready webhook
    would block the fail-closed claim webhooks whenever the API server is slow, so a view that cannot say is
    reported, not fatal; rules answer its unknown lookups as such."""
    try:
        return view.status()
    except Exception as exc:
        log.exception("cluster view status failed")
        return {"error": f"cluster view status unavailable ({type(exc).__name__})"}


def _add_error_handlers(app: Flask) -> None:
    """Every error flask sees is a JSON answer with its status; an unexpected one is logged with its traceback."""

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        code = exc.code or 500
        if code == 413:
            message = f"request body is larger than {MAX_BODY // (1024 * 1024)} MiB"
        elif code == 405:
            message = f"{request.method} is not allowed on {request.path}"
        elif code == 404:
            message = (f"no such endpoint {request.path}; "
                       "use POST /mutate, POST /validate, GET /healthz, /readyz, /metrics")
        else:
            message = exc.description or exc.name
        metrics.bad_requests(str(code)).inc()
        return _json({"error": message, "status": code}, code)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.path)
        return _json({"error": "internal error; see the webhook's logs", "status": 500}, 500)
