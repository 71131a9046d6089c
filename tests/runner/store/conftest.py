"""Fixtures of the store tests: one real S3-compatible server (moto_server) for the session."""

from __future__ import annotations

import pytest
from moto_util import Moto


@pytest.fixture(scope="session")
def moto(tmp_path_factory):
    """moto_server on a free port, authentication on, bucket `lab`; stopped by its PID at the end."""
    server = Moto(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


@pytest.fixture
def s3(moto, monkeypatch):
    """The standard AWS variables a lab sets for its server, for this test only."""
    for name, value in moto.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    return moto
