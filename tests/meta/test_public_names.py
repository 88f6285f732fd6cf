"""Names users see stay when modules move (issue 44 item 5): logger names in their logs, the entry point, the verbs.

A log line reads ``<time> <level> <logger>: <message>`` (webhook/cli.py); alerting and log queries match the
logger names, so a module keeps the logger name it had before it moved into a folder.
"""

from __future__ import annotations

import importlib
import logging
import tomllib

import pytest

from tests.helpers import ROOT

#: module -> the logger name it logs under (the module's name before issue 44 moved it into a folder)
LOGGERS = {
    "webhook.admission.answer": "webhook.admission",
    "webhook.admission.engine": "webhook.engine",
    "webhook.cluster.api": "webhook.kube_api",
    "webhook.cluster.device_service": "webhook.device_service",
    "webhook.cluster.informer": "webhook.informer",
    "webhook.cluster.leader": "webhook.leader",
    "webhook.cluster.lists": "webhook.kube_lists",
    "webhook.cluster.live_view": "webhook.live_view",
    "webhook.commands.serve": "webhook.commands.serve",
    "webhook.fleet.gauge_watch": "webhook.gauge_watch",
    "webhook.fleet.gauges": "webhook.gauges",
    "webhook.policy.reload": "webhook.policy",
    "webhook.serve.app": "webhook.app",
    "webhook.serve.callers": "webhook.callers",
    "webhook.serve.fast_path": "webhook.fast_path",
    "webhook.serve.gauge_writer": "webhook.gauge_writer",
    "webhook.serve.reconciler": "webhook.reconciler",
    "webhook.serve.recording": "webhook.recording",
    "webhook.serve.server": "webhook.server",
    "webhook.serve.supervisor": "webhook.supervisor",
    "webhook.serve.tls": "webhook.tls",
}


@pytest.mark.parametrize(("module", "logger"), sorted(LOGGERS.items()))
def test_each_module_logs_under_its_old_name(module, logger):
    log = importlib.import_module(module).log
    assert isinstance(log, logging.Logger) and log.name == logger


def test_every_module_with_a_logger_is_pinned():
    """A new module's logger is a name users will see: pin it here too."""
    found = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "webhook").rglob("*.py")
             if "logging.getLogger(" in p.read_text(encoding="utf-8").replace('logging.getLogger("urllib3")', "")}
    assert found == set(LOGGERS)


def test_the_entry_point_and_the_verbs_stay():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["scripts"] == {"dra-webhook": "webhook.cli:main"}
    from webhook import cli

    assert cli.COMMANDS == ("serve", "check", "lint", "test", "certs", "gates", "report", "audit", "preflight",
                            "schema", "replay", "explain", "convert", "compile", "reconcile")
