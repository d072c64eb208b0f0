"""The `artifact_save` tool: the agent writes a file (an HTML report, a table) and gets its link.

Each artifact lives in its own folder, `<data_dir>/artifacts/<uuid4>/<filename>`, with a row in
`artifacts` (uuid, session, title, file name, content type, size). The link
`<app.public_url>/artifacts/<uuid>/<filename>` is an unguessable capability URL served by
`bruce_bot/web/artifacts.py`. The model chooses the file name, so it is reduced to a safe
basename first: no separators, no `..`, no leading dot, no control or look-alike characters,
only `[A-Za-z0-9._-]`, a bounded length and an extension from `CONTENT_TYPES` (`.html` when it has
none or another one).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import unicodedata
import uuid
from pathlib import Path
from typing import Any

import structlog

from bruce_bot.domain import OutboundFile
from bruce_bot.storage.artifacts import ArtifactStore
from bruce_bot.tools.registry import Tool, ToolContext, ToolError

log = structlog.get_logger(__name__)

CONTENT_TYPES: dict[str, str] = {
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".csv": "text/csv; charset=utf-8",
    ".json": "application/json; charset=utf-8",
    ".svg": "image/svg+xml; charset=utf-8",
    # Files run_code's programs write (tools/code_files.py); served with the same policy.
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".pdf": "application/pdf",
    ".tsv": "text/tab-separated-values; charset=utf-8",
    ".xml": "application/xml; charset=utf-8",
    ".zip": "application/zip",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".bin": "application/octet-stream",
}
DEFAULT_EXTENSION = ".html"
DEFAULT_STEM = "artifact"
MAX_FILENAME_CHARS = 100
MAX_TITLE_CHARS = 300

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_DOTS = re.compile(r"\.{2,}")
_DASHES = re.compile(r"-{2,}")


def _visible(text: str) -> str:
    """`text` in compatibility form (fullwidth ／ becomes /, é becomes e + accent) without control,
    format (zero-width, bidi override), private-use or combining characters."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if unicodedata.category(ch)[0] not in "CM")


def _printable(text: str) -> str:
    """`text` on one line, without control or format characters (accents are kept)."""
    text = " ".join(unicodedata.normalize("NFC", text).split())
    return "".join(ch for ch in text if unicodedata.category(ch)[0] != "C")


def sanitise_filename(raw: str) -> str:
    """A safe basename for `raw`, always ending in an extension of `CONTENT_TYPES`."""
    name = re.split(r"[/\\]", _visible(raw))[-1]  # the basename only, whatever the separator
    name = _DASHES.sub("-", _DOTS.sub(".", _UNSAFE.sub("-", name)))  # no ".." anywhere
    stem, dot, extension = name.rpartition(".")
    stem = stem.strip(".-_")  # no leading dot: no hidden files
    if not dot or (not stem and f".{extension.lower()}" not in CONTENT_TYPES):
        stem, extension = name.strip(".-_"), ""  # no extension (".htaccess" is a name)
    extension = f".{extension.lower()}"
    if extension not in CONTENT_TYPES:
        extension = DEFAULT_EXTENSION
    stem = stem[: MAX_FILENAME_CHARS - len(extension)].rstrip(".-_")
    return f"{stem or DEFAULT_STEM}{extension}"


def content_type_of(filename: str) -> str:
    return CONTENT_TYPES[Path(filename).suffix.lower()]


def artifact_file(root: Path, artifact_uuid: str, filename: str) -> Path | None:
    """Where an artifact's file lives, or None when the parts would lead outside `root`."""
    if filename != sanitise_filename(filename):
        return None
    try:
        canonical = str(uuid.UUID(artifact_uuid))
    except ValueError:
        return None
    if canonical != artifact_uuid:
        return None
    path = root / canonical / filename
    if not path.resolve().is_relative_to(root.resolve()):
        return None
    return path


SAVED = "Artifact saved at {base}/artifacts/{uuid}/{filename}"
_SAVED_LINK = re.compile(r"^Artifact saved at \S*/artifacts/([0-9a-f-]{36})/([^/\s]+)$")


def saved_artifact(result: str) -> OutboundFile | None:
    """The artifact a successful `artifact_save` result names (what `execute` returns), so a
    turn can send the file along with its reply; None for any other text."""
    match = _SAVED_LINK.match(result.strip())
    if match is None or artifact_file(Path("/"), match[1], match[2]) is None:
        return None
    try:
        content_type = content_type_of(match[2])
    except KeyError:
        return None
    return OutboundFile(match[1], match[2], content_type)


def write_new(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, mode=0o700)
    # O_EXCL: never overwrite; 0600: the data dir is the daemon user's only (private_files.py).
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


ARTIFACT_TOOL = "artifact_save"


class ArtifactSaveTool(Tool):
    name = ARTIFACT_TOOL
    effect = "own_state"
    description = (
        "Save a file for the user (an HTML report or dashboard, Markdown, text, CSV, JSON or SVG) "
        "and get a link to it. Put the complete document in 'content'; an HTML page must be "
        "self-contained (inline CSS and JavaScript, images as data: URLs): it is shown with no "
        "network access, so CDN links, remote images and fetch() do not work. Returns 'Artifact "
        "saved at <link>': give the user that exact link."
    )
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {
            "filename": {
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
                "description": (
                    "File name with its extension, e.g. news.html or prices.csv (.html, .htm, "
                    ".md, .txt, .csv, .json or .svg; .html when missing)."
                ),
            },
            "title": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_TITLE_CHARS,
                "description": "A short human title, e.g. 'Tech news in Brazil, 2 March'.",
            },
            "content": {
                "type": "string",
                "minLength": 1,
                "description": "The whole file content (a full HTML document for .html).",
            },
        },
        "required": ["filename", "title", "content"],
        "additionalProperties": False,
    }

    def __init__(self, store: ArtifactStore, root: Path, public_url: str, max_bytes: int) -> None:
        self.store = store
        self.root = root
        self.public_url = public_url.rstrip("/")
        self.max_bytes = max_bytes

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> str:
        data = arguments["content"].encode("utf-8", errors="replace")
        if len(data) > self.max_bytes:
            raise ToolError(
                f"the content is {len(data):,} bytes, over the limit of {self.max_bytes:,} bytes "
                "(tools.artifacts.max_bytes); make the document smaller, e.g. fewer items or "
                "less inline styling, and save it again"
            )
        filename = sanitise_filename(arguments["filename"])
        title = _printable(arguments["title"])[:MAX_TITLE_CHARS] or filename
        artifact_uuid = str(uuid.uuid4())
        path = artifact_file(self.root, artifact_uuid, filename)
        assert path is not None  # sanitised name and fresh uuid: always inside the root
        await asyncio.to_thread(write_new, path, data)
        try:
            await self.store.add(
                uuid=artifact_uuid,
                session_id=context.session_id,
                title=title,
                filename=filename,
                content_type=content_type_of(filename),
                size_bytes=len(data),
            )
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, path.parent, True)
            raise
        log.info(
            "artifact_saved",
            uuid=artifact_uuid,
            filename=filename,
            size_bytes=len(data),
            session_id=context.session_id,
        )
        return SAVED.format(base=self.public_url, uuid=artifact_uuid, filename=filename)
