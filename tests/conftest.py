"""Session fixtures: one real TLS server shared by the read-only live tests; Hypothesis profiles."""

from __future__ import annotations

import os

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
