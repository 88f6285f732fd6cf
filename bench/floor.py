"""The floor: the webhook's own stack with nothing on the request path but parsing and answering.

It is ``webhook.serve.server.WebhookServer`` itself (same gunicorn settings: gthread, workers, threads,
keep-alive, timeouts, TLS context hook, worker tmp dir) with ``load()`` returning a flask app whose
admission routes parse the AdmissionReview with orjson and answer ``allowed: true``. The ratio of the
webhook's throughput to this one's is the cost of the policy engine and its bookkeeping.

Usage: ``python bench/floor.py --cert-dir DIR --bind HOST:PORT [--workers N] [--threads N]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
from flask import Flask, Response, request  # noqa: E402

MAX_BODY = 7 * 1024 * 1024


def floor_app() -> Flask:
    app = Flask("dra-webhook-floor")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY

    def admit() -> Response:
        doc = orjson.loads(request.get_data(cache=False))
        answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "response": {"uid": doc["request"]["uid"], "allowed": True}}
        return Response(orjson.dumps(answer), status=200, mimetype="application/json")

    app.add_url_rule("/mutate", "mutate", admit, methods=["POST"])
    app.add_url_rule("/validate", "validate", admit, methods=["POST"])

    @app.get("/healthz")
    @app.get("/readyz")
    def ready() -> Response:
        return Response(b'{"ready":true}', status=200, mimetype="application/json")

    return app


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cert-dir", type=Path, required=True)
    ap.add_argument("--bind", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--worker-class", default=None,
                    help="a gunicorn worker class instead of the webhook's (e.g. gthread: the stock worker, "
                    "for the slow-client comparison in bench/results.md)")
    args = ap.parse_args()
    # Same metrics set-up as `serve` (the child_exit hook uses it), in a private directory.
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="dra-floor-metrics-"))

    from webhook.serve.server import ServeOptions, WebhookServer

    class FloorServer(WebhookServer):
        def load_config(self) -> None:
            super().load_config()
            if args.worker_class:
                self.cfg.set("worker_class", args.worker_class)

        def load(self) -> Any:
            return floor_app()

    opts = ServeOptions(policy=ROOT / "policies" / "default.yaml", cert_dir=args.cert_dir, bind=args.bind,
                        workers=args.workers, threads=args.threads)
    FloorServer(opts).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
