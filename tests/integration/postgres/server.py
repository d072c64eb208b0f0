"""A real PostgreSQL server for the tests, and a fresh database on it for each test.

`BRUCE_TEST_POSTGRES_URL` (any `postgresql://` URL of a role allowed to create databases) points
the tests at an existing server. Otherwise a throwaway cluster is made with Debian's binaries
(`/usr/lib/postgresql/<version>/bin`) in a temporary directory, listening on 127.0.0.1 on a free
port, with durability switched off for speed and commit timestamps on (the cluster judges read
when each delivery was committed), and removed at the end of the session. initdb refuses
to run as root, so as root the cluster belongs to the `postgres` user that the package creates.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import URL, make_url

URL_ENV = "BRUCE_TEST_POSTGRES_URL"
SERVER_USER = "postgres"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        pytest.fail(
            "PostgreSQL's server binaries are not installed (no /usr/lib/postgresql/*/bin/initdb)"
            ": run `make test`, which installs Debian's postgresql package, or point "
            f"{URL_ENV} at a PostgreSQL server",
            pytrace=False,
        )
    return Path(found[-1]).parent  # the newest version


class PostgresServer:
    """A server and an admin URL on it; `create_database` gives each test its own database."""

    def __init__(
        self,
        admin_url: URL,
        cluster: Path | None = None,
        bin_dir: Path | None = None,
        as_owner: Sequence[str] = (),
    ) -> None:
        self.admin_url = admin_url
        self._cluster = cluster  # the throwaway cluster's directory, None for an external server
        self._bin = bin_dir
        self._as_owner = list(as_owner)  # runs a server program as the cluster's owner
        self._start_args: list[str] = []  # pg_ctl's, to start it again after `pause`

    @classmethod
    def external(cls, url: str) -> PostgresServer:
        return cls(make_url(url).set(drivername="postgresql"))

    @classmethod
    def throwaway(cls) -> PostgresServer:
        bin_dir = _binaries()
        as_owner: list[str] = []
        root = Path(tempfile.mkdtemp(prefix="bruce-postgres-"))
        if os.geteuid() == 0:  # initdb refuses root
            shutil.chown(root, SERVER_USER)
            as_owner = ["runuser", "-u", SERVER_USER, "--"]
        port = _free_port()
        admin_url = URL.create("postgresql", username=SERVER_USER, host="127.0.0.1", port=port)
        server = cls(admin_url, cluster=root, bin_dir=bin_dir, as_owner=as_owner)
        data, log = root / "data", root / "server.log"
        server._run(
            "initdb", "-D", str(data), "-U", SERVER_USER, "--auth=trust", "--no-sync",
            "--encoding=UTF8", "--locale=C",
        )  # fmt: skip
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 "
            "-c track_commit_timestamp=on"
        )
        server._start_args = ["-D", str(data), "-l", str(log), "-o", options, "-w", "start"]
        try:
            server._run("pg_ctl", *server._start_args)
        except RuntimeError as exc:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(f"{exc}\n{tail}") from None
        return server

    def _run(self, program: str, *args: str) -> None:
        assert self._bin is not None
        command = [*self._as_owner, str(self._bin / program), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip()}")

    def pause(self) -> None:
        """Stop the throwaway server (fast: open connections are closed), keeping its data."""
        assert self._cluster is not None, "only a throwaway server can be stopped"
        self._run("pg_ctl", "-D", str(self._cluster / "data"), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        """Start the throwaway server again after `pause`, on the same port."""
        assert self._cluster is not None and self._start_args
        self._run("pg_ctl", *self._start_args)

    def stop(self) -> None:
        if self._cluster is None:
            return
        try:
            self._run("pg_ctl", "-D", str(self._cluster / "data"), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self._cluster, ignore_errors=True)

    def _admin(self) -> psycopg.Connection:
        url = self.admin_url
        return psycopg.connect(
            host=url.host,
            port=url.port,
            user=url.username,
            password=url.password,
            dbname=url.database or "postgres",
            autocommit=True,
        )

    def create_database(self) -> str:
        """A new empty database; returns its `postgresql+asyncpg://` URL for Bruce's config."""
        name = f"bruce_test_{uuid.uuid4().hex[:12]}"
        with self._admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.admin_url.set(drivername="postgresql+asyncpg", database=name).render_as_string(
            hide_password=False
        )

    def drop_database(self, url: str) -> None:
        name = make_url(url).database
        with self._admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    external = os.environ.get(URL_ENV)
    if external:
        yield PostgresServer.external(external)
        return
    server = PostgresServer.throwaway()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a fresh, empty database on the test server (dropped after the test)."""
    url = postgres_server.create_database()
    try:
        yield url
    finally:
        postgres_server.drop_database(url)
