"""Session fixtures: one real TLS server shared by the read-only live tests; Hypothesis profiles; every test
marked with the ids of the rules it exercises (``-k <rule-id>``)."""

from __future__ import annotations

import functools
import inspect
import os
import re

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import Client, Server, start_server

# CI runs the same examples every time (derandomize: the seed comes from the test's code), so a red build
# is reproducible and never luck; 100 examples unless a test sets its own. Locally the default profile
# explores new examples each run, and the example database replays what failed before.
settings.register_profile("ci", derandomize=True, max_examples=100, database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "dev"))


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Server:
    server = start_server(tmp_path_factory.mktemp("live"))
    yield server
    server.stop()


@pytest.fixture()
def client(live_server: Server) -> Client:
    c = live_server.client()
    yield c
    c.close()


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """With pytest-xdist (``-n``): each test module runs whole on one worker, and the end-to-end suite runs
    whole on one worker, so its session control plane is started once while the other worker runs unit tests."""
    from xdist.scheduler import LoadScopeScheduling

    class E2EOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "tests/e2e" if nodeid.startswith("tests/e2e/") else super()._split_scope(nodeid)

    return E2EOnOneWorker(config, log)


# -- a rule's tests carry its id (issue 44 item 3): `pytest -k allocation-mode-all` selects them ----------------------

RULES_KEY = pytest.StashKey[dict[str, list[str]]]()  # rule id -> every test marked with it
NAMED_KEY = pytest.StashKey[dict[str, list[str]]]()  # rule id -> the tests that name it (not only a parameter)


def _rule_patterns() -> list[tuple[str, re.Pattern[str]]]:
    """Each rule id with what names it in a test: the id itself, its constant in ``webhook.policy.rule_ids``, or
    the id in snake case (the rule's function, a test's name)."""
    from webhook.policy import rule_ids

    consts = {value: name for name, value in vars(rule_ids).items() if name.isupper() and isinstance(value, str)}
    snake = {rid: rid.replace("-", "_") for rid in rule_ids.RULE_IDS}
    return [(rid, re.compile(rf"(?<![\w-]){re.escape(rid)}(?![\w-])|\b{consts[rid]}\b"
                             rf"|(?<![a-z0-9]){snake[rid]}(?![a-z0-9])")) for rid in rule_ids.RULE_IDS]


@functools.cache
def _module_rules() -> dict[str, tuple[str, ...]]:
    """``webhook/rules/<m>.py`` -> the ids of the rules it declares (``tests/rules/test_<m>.py`` tests them)."""
    from webhook.rules.ruleset import standard_rules

    out: dict[str, list[str]] = {}
    for r in standard_rules().rules:
        out.setdefault(r.fn.__module__.rpartition(".")[2], []).append(r.id)
    return {m: tuple(ids) for m, ids in out.items()}


@functools.cache
def _source(fn: object) -> str:
    try:
        return inspect.getsource(fn)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return ""


def rules_of(item: pytest.Item, patterns: list[tuple[str, re.Pattern[str]]]) -> tuple[set[str], set[str]]:
    """The rules a test exercises, as (named, by parameter): named in its function's source or name, by a
    ``@pytest.mark.rule("<id>")`` marker, or by being in ``tests/rules/test_<m>.py`` where ``webhook/rules/<m>.py``
    declares one rule; or only in its parameters (a case table, a test run over every rule id)."""
    text = item.function.__name__ if hasattr(item, "function") else item.name
    fn = getattr(item, "function", None)
    if fn is not None:
        text += "\n" + _source(fn)
    named = {rid for rid, pattern in patterns if pattern.search(text)}
    named.update(str(arg) for mark in item.iter_markers("rule") for arg in mark.args)
    path = item.path
    if path.parent.name == "rules" and path.parent.parent.name == "tests" and path.stem.startswith("test_"):
        declared = _module_rules().get(path.stem.removeprefix("test_"), ())
        if len(declared) == 1:
            named.update(declared)
    callspec = getattr(item, "callspec", None)
    params = repr(callspec.params) + callspec.id if callspec is not None else ""
    return named, {rid for rid, pattern in patterns if pattern.search(params)} - named


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect: the hygiene test sees every collected test
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    patterns = _rule_patterns()
    by_rule: dict[str, list[str]] = {rid: [] for rid, _ in patterns}
    named_by_rule: dict[str, list[str]] = {rid: [] for rid, _ in patterns}
    for item in items:
        named, by_param = rules_of(item, patterns)
        for rid in sorted(named | by_param):
            item.extra_keyword_matches.add(rid)
            by_rule.setdefault(rid, []).append(item.nodeid)
        for rid in sorted(named):
            named_by_rule.setdefault(rid, []).append(item.nodeid)
    config.stash[RULES_KEY] = by_rule
    config.stash[NAMED_KEY] = named_by_rule


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rule(id): the test exercises this rule (when its source does not name it)")
