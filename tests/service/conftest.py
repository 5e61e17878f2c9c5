"""Session fixtures of the service tests: the database, the tokens file, one real server
(a subprocess on loopback, stopped at the end), and local and remote views of the data."""

from pathlib import Path

import pytest

import turbdb

from servicekit import FULL, TOKENS_TOML, build_database, running_server


@pytest.fixture(scope="session")
def service_db(tmp_path_factory) -> Path:
    return build_database(tmp_path_factory.mktemp("service"))


@pytest.fixture(scope="session")
def tokens_file(service_db) -> Path:
    path = service_db.parent / "tokens.toml"
    path.write_text(TOKENS_TOML)
    return path


@pytest.fixture(scope="session")
def server(service_db, tokens_file):
    """The shared server. Cutouts stream in 4 KiB slabs, so every cutout takes many."""
    with running_server(service_db, service_db.parent / "server.log", "--tokens", str(tokens_file),
                        "--cutout-chunk-bytes", "4096") as s:
        yield s
        assert s.process.poll() is None, f"the server died:\n{s.log.read_text()}"


@pytest.fixture(scope="session")
def local(service_db):
    return turbdb.open(service_db)


@pytest.fixture(scope="session")
def remote(server):
    with turbdb.connect(server.url, token=FULL) as db:
        yield db
