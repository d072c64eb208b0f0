"""The dashboard's HTTP server: uvicorn serving the web app inside Bruce's event loop.

Bruce owns the process's signals, so uvicorn's handlers are left out; the server is started as a
task and considered up once it listens, or reported with what to change when it cannot.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

WAIT_FOR_LISTENING_SECONDS = 10.0
STOP_SECONDS = 5.0


class CannotListenError(Exception):
    """The server could not listen (the port is taken, the address is not ours)."""


class WebServer:
    def __init__(self, app: Any, host: str, port: int) -> None:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                # Since uvicorn 0.29 (no more `install_signal_handlers`) SIGINT and SIGTERM are
                # taken here while it serves: it would stop the dashboard on its own, ahead of
                # Bruce's shutdown, and raise the signal again. Bruce's handlers stop it.
                yield

        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            lifespan="off",
            server_header=False,
        )
        self._server = Server(config)
        self._host, self._port = host, port
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> str:
        """Serve in the background; returns the URL once listening."""
        self._task = asyncio.create_task(self._server.serve(), name="web-server")
        deadline = time.monotonic() + WAIT_FOR_LISTENING_SECONDS
        while not self._server.started:
            if self._task.done() or time.monotonic() > deadline:
                with contextlib.suppress(BaseException):
                    await self._task
                raise CannotListenError(
                    f"the web dashboard could not listen on {self._host}:{self._port} (is the "
                    "port in use?). Change web.port in config.yml or stop the other program."
                )
            await asyncio.sleep(0.002)  # ready is the moment it listens: do not oversleep it
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self._task, STOP_SECONDS)
