"""The WSGI fast path (issue 17): admission POSTs answered straight from WSGI, without flask.

flask's request context, routing and response objects cost about as much as the rules for a small review.
POSTs to the two admission endpoints with a length within the limit are answered by the same ``answer``
function the flask view uses; everything else (other methods and paths, chunked bodies, bodies over the
limit) goes through flask and its error handlers. tests/serve/test_fast_path.py checks both paths answer
byte for byte the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import orjson
from werkzeug.http import HTTP_STATUS_CODES

log = logging.getLogger("webhook.fast_path")

Answer = Callable[[str, str, bytes], tuple[int, bytes]]
"""``answer(phase, mimetype, body) -> (status, JSON bytes)`` for one admission POST."""


class WSGIApp(Protocol):
    """A WSGI application (PEP 3333), as flask's ``app.wsgi_app`` is one."""

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any: ...


PHASES = {"/mutate": "mutate", "/validate": "validate"}


def wrap(flask_wsgi: WSGIApp, answer: Answer, max_body: int) -> WSGIApp:
    """A WSGI app that answers admission POSTs with a Content-Length up to ``max_body`` itself, else calls flask."""

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        phase = PHASES.get(environ.get("PATH_INFO", ""))
        length = environ.get("CONTENT_LENGTH")
        if phase is None or environ.get("REQUEST_METHOD") != "POST" or not length or not length.isdigit() \
                or int(length) > max_body:
            return flask_wsgi(environ, start_response)  # everything else, with flask's error handling
        try:
            mimetype = environ.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower()
            status, data = answer(phase, mimetype, environ["wsgi.input"].read(int(length)))
        except Exception:
            log.exception("unexpected error on POST %s", environ.get("PATH_INFO"))
            status, data = 500, orjson.dumps({"error": "internal error; see the webhook's logs", "status": 500})
        start_response(f"{status} {HTTP_STATUS_CODES.get(status, 'Error').upper()}",  # as werkzeug's Response
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    return wsgi
