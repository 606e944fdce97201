"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakewheels import build_fake_wheel  # envs fixtures, below

# --- envs fixtures (tests/test_envs.py; reused by the fakefw end-to-end tests) -------------------------------


class FakeWheels:
    """A find-links folder of fake wheels: call it to add `name-version` there and get the wheel's path."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, name: str, version: str, files: dict[str, str] | None = None, **kwargs) -> Path:
        return build_fake_wheel(self.folder, name, version, files, **kwargs)


@pytest.fixture
def fake_wheel_factory(tmp_path: Path) -> FakeWheels:
    """Builds fake wheels into one find-links folder for this test (`factory.folder`)."""
    return FakeWheels(tmp_path / "wheels")


# --- end of envs fixtures ----------------------------------------------------------------------------------


# --- fakefw project fixtures (lead; workflow and end-to-end tests) -----------------------------------------

import os  # noqa: E402

from fakeproject import FakeProject, make_fake_project  # noqa: E402,F401 - FakeProject: for annotations


@pytest.fixture(scope="session")
def env_cache(tmp_path_factory) -> Path:
    """One environment cache for the whole test session, as a user's machine has."""
    return tmp_path_factory.mktemp("modelci-cache")


@pytest.fixture
def fake_project(tmp_path: Path, env_cache: Path, monkeypatch) -> FakeProject:
    """A fakefw project; the process environment points at its wheels, offline."""
    project = make_fake_project(tmp_path / "project", env_cache)
    for key in [k for k in os.environ if k.startswith("MODELCI_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("MODELCI_FIND_LINKS", str(project.wheels))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.chdir(project.root)
    return project


# --- history database fixtures (store tests run on SQLite and on a real PostgreSQL server) -------------------

@pytest.fixture(scope="session")
def postgres_server():
    """One real PostgreSQL server for the test session (initdb + pg_ctl on a free loopback port)."""
    # imported here: the zoo tests run in venvs holding only a framework and pytest (.ci/run), without psycopg
    from pgserver import PostgresServer

    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def history_db(request, tmp_path: Path) -> str:
    """The `db` setting of a fresh, empty history: a SQLite file, or a new database on the PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "history.db")
    return request.getfixturevalue("postgres_server").database()
