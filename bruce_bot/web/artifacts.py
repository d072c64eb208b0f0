"""`GET /artifacts/<uuid>/<filename>`: the files the agent saved, served without login.

The link is a capability: whoever has the uuid may read the file (docs/design.md). A file is served
only when the uuid is a canonical UUID, a row with it exists and the file name equals the stored
one, so nothing else under the data folder can be reached (no listing, no `..`, encoded or not).
Artifacts are written by a model that read arbitrary web pages, so they are treated as untrusted.
The Content-Security-Policy runs them in an opaque origin (`sandbox allow-scripts`: scripts
work, but the dashboard's cookies and API are out of reach) and gives them only what a
self-contained page needs: its inline scripts and styles, images and media from `data:` and
`blob:`, fonts from `data:`. Everything else falls to `default-src 'none'`: no fetch, XHR,
WebSocket or EventSource (connect-src), no script, style, image or font from any address, no
frames or workers, no form posts (`form-action 'none'`, which has no fallback), no `<base>`
(`base-uri 'none'`). So an injected page can neither load a phishing kit nor send what is typed
into it anywhere by a request. The type is never sniffed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from bruce_bot.storage.artifacts import ArtifactStore
from bruce_bot.tools.artifacts import artifact_file

ARTIFACT_CSP = "; ".join(
    [
        "sandbox allow-scripts",  # never allow-same-origin
        "default-src 'none'",
        "script-src 'unsafe-inline'",
        "style-src 'unsafe-inline'",
        "img-src data: blob:",
        "media-src data: blob:",
        "font-src data:",
        "form-action 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS = {
    "Content-Security-Policy": ARTIFACT_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "private, max-age=300",
}


def _not_found() -> Response:
    headers = {key: value for key, value in SECURITY_HEADERS.items() if key != "Cache-Control"}
    return PlainTextResponse("Not found", status_code=404, headers=headers)


def _file_on_disk(root: Path, artifact_uuid: str, filename: str) -> Path | None:
    """The artifact's file when the parts stay inside `root` and it exists (disk calls: run in a
    worker thread, off the event loop)."""
    path = artifact_file(root, artifact_uuid, filename)
    return path if path is not None and path.is_file() else None


def artifact_routes(store: ArtifactStore, root: Path) -> list[BaseRoute]:
    """The artifact route, serving files from `root` (`<data_dir>/artifacts`)."""

    async def serve(request: Request) -> Response:
        artifact_uuid = request.path_params["uuid"]
        filename = request.path_params["filename"]
        path = await asyncio.to_thread(_file_on_disk, root, artifact_uuid, filename)
        if path is None:
            return _not_found()
        artifact = await store.get(artifact_uuid)
        if artifact is None or artifact.filename != filename:
            return _not_found()
        return FileResponse(path, media_type=artifact.content_type, headers=SECURITY_HEADERS)

    async def not_found(request: Request) -> Response:
        return _not_found()

    return [
        Route("/artifacts/{uuid}/{filename}", serve, methods=["GET", "HEAD"]),
        Route("/artifacts/{rest:path}", not_found, methods=["GET", "HEAD"]),  # listing, etc.
    ]
