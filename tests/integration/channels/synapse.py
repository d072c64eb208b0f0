"""A real Synapse homeserver for the Matrix tests, started from its own venv (`make synapse`).

Synapse's pins must not touch Bruce's, so it lives in `.venv-synapse` (or wherever
BRUCE_SYNAPSE_PYTHON points); without it the Matrix tests are skipped, saying why. The server
keeps everything in a temporary directory: SQLite, `server_name: localhost`, one plain HTTP
listener on 127.0.0.1 on a free port, no federation, no open registration (users are made
through the shared-secret admin API, `/_synapse/admin/v1/register`), a signing key made by
`--generate-keys`. Rate limits are raised: a test sends faster than a person types (Bruce's
answers, the user's messages, joins and invites within a second), and Synapse's defaults
(0.2 messages/s, a few joins) would make it wait seconds on 429s, which tests nothing here.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[3]
SHARED_SECRET = "bruce-test-registration-secret"
START_TIMEOUT_SECONDS = 60.0
_GENEROUS = {"per_second": 1000, "burst_count": 1000}


def synapse_python() -> Path | None:
    """The interpreter of Synapse's venv: BRUCE_SYNAPSE_PYTHON, else ./.venv-synapse's."""
    configured = os.environ.get("BRUCE_SYNAPSE_PYTHON")
    candidate = Path(configured) if configured else REPO / ".venv-synapse" / "bin" / "python"
    return candidate if candidate.exists() else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def homeserver_config(directory: Path, port: int) -> dict[str, object]:
    return {
        "server_name": "localhost",
        "pid_file": str(directory / "homeserver.pid"),
        "public_baseurl": f"http://127.0.0.1:{port}/",
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }
        ],
        "database": {"name": "sqlite3", "args": {"database": str(directory / "homeserver.db")}},
        "media_store_path": str(directory / "media"),
        "signing_key_path": str(directory / "localhost.signing.key"),
        "log_config": str(directory / "log.config"),
        "report_stats": False,
        "enable_registration": False,
        "registration_shared_secret": SHARED_SECRET,
        "federation_domain_whitelist": [],
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "presence": {"enabled": False},
        "rc_message": _GENEROUS,
        "rc_joins": {"local": _GENEROUS, "remote": _GENEROUS},
        "rc_invites": {"per_room": _GENEROUS, "per_user": _GENEROUS, "per_issuer": _GENEROUS},
        "rc_login": {"address": _GENEROUS, "account": _GENEROUS, "failed_attempts": _GENEROUS},
        "rc_joins_per_room": _GENEROUS,
    }


LOG_CONFIG = """version: 1
formatters:
  plain: {format: '%(asctime)s %(levelname)s %(name)s %(message)s'}
handlers:
  file: {class: logging.FileHandler, formatter: plain, filename: LOGFILE}
root: {level: WARNING, handlers: [file]}
disable_existing_loggers: false
"""


@dataclass(frozen=True, slots=True)
class MatrixUser:
    user_id: str
    password: str
    access_token: str
    device_id: str


class Synapse:
    """A running homeserver: `url`, `register`, `stop`."""

    def __init__(self, directory: Path, python: Path) -> None:
        self.directory = directory
        self._python = python
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        config_path = self.directory / "homeserver.yaml"
        config_path.write_text(yaml.safe_dump(homeserver_config(self.directory, self.port)))
        log_file = self.directory / "homeserver.log"
        (self.directory / "log.config").write_text(LOG_CONFIG.replace("LOGFILE", str(log_file)))
        command = [str(self._python), "-m", "synapse.app.homeserver", "-c", str(config_path)]
        subprocess.run(
            [*command, "--generate-keys"], check=True, capture_output=True, cwd=self.directory
        )
        self._output = (self.directory / "stdout.log").open("wb")
        self._process = subprocess.Popen(
            command, cwd=self.directory, stdout=self._output, stderr=subprocess.STDOUT
        )
        self._wait_until_up()

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"synapse exited: {self.tail()}")
            try:
                if httpx.get(f"{self.url}/_matrix/client/versions", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"synapse did not answer within {START_TIMEOUT_SECONDS} s")

    def tail(self) -> str:
        out = self.directory / "stdout.log"
        return out.read_text(errors="replace")[-3000:] if out.exists() else ""

    def register(self, localpart: str, password: str = "secret-password") -> MatrixUser:
        """A new user through the shared-secret admin API (nonce, then HMAC-SHA1)."""
        endpoint = f"{self.url}/_synapse/admin/v1/register"
        nonce = httpx.get(endpoint, timeout=10).json()["nonce"]
        signed = "\x00".join((nonce, localpart, password, "notadmin")).encode()
        mac = hmac.new(SHARED_SECRET.encode(), signed, hashlib.sha1)
        body = {
            "nonce": nonce,
            "username": localpart,
            "password": password,
            "admin": False,
            "mac": mac.hexdigest(),
        }
        response = httpx.post(endpoint, json=body, timeout=10)
        response.raise_for_status()
        data = response.json()
        return MatrixUser(data["user_id"], password, data["access_token"], data["device_id"])

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self._output.close()


def main() -> None:  # a manual check: python -m tests.integration.channels.synapse
    import tempfile

    python = synapse_python()
    if python is None:
        sys.exit("no Synapse venv: run `make synapse` or set BRUCE_SYNAPSE_PYTHON")
    with tempfile.TemporaryDirectory() as directory:
        server = Synapse(Path(directory), python)
        started = time.monotonic()
        server.start()
        print("up in", round(time.monotonic() - started, 1), "s at", server.url)
        print(server.register("alice"))
        server.stop()


if __name__ == "__main__":
    main()
