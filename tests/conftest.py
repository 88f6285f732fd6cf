"""Session fixtures: one real TLS server shared by the read-only live tests."""

from __future__ import annotations

import pytest

from tests.helpers import Client, Server, start_server


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
