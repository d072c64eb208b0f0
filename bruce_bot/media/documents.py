"""Documents read as text: PDF (pypdf), plain text, Markdown, CSV and JSON.

The text is cut to `documents.max_chars` with a note saying so, and always reaches the model as
untrusted content (view.py): a document is someone else's words, never instructions. A PDF is
parsed by pypdf in a child process with memory and time limits (pdf_sandbox.py); `read_document`
blocks meanwhile: callers run it in a thread.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import PurePath

from bruce_bot.media.pdf_sandbox import PdfLimitExceeded, PdfLimits, read_pdf

# By file name first (clients often send text files as application/octet-stream).
_SUFFIXES = {
    ".pdf": "pdf",
    ".txt": "text",
    ".text": "text",
    ".log": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
}
_MIME_TYPES = {
    "application/pdf": "pdf",
    "text/plain": "text",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/csv": "csv",
    "text/tab-separated-values": "csv",
    "application/json": "json",
}
SUPPORTED = "PDF, plain text, Markdown, CSV and JSON"


class DocumentProblem(Exception):
    """The document cannot be read; the message says why, for the user."""


def document_type(name: str, mime_type: str) -> str | None:
    """ "pdf", "text", "markdown", "csv", "json", or None when Bruce cannot read the type."""
    by_name = _SUFFIXES.get(PurePath(name.lower()).suffix)
    return by_name or _MIME_TYPES.get(mime_type.split(";")[0].strip().lower())


def describe_type(name: str, mime_type: str) -> str:
    """How to name an unsupported type to the user: ".docx (application/vnd...)"."""
    suffix = PurePath(name).suffix
    if suffix and mime_type:
        return f"{suffix} ({mime_type})"
    return suffix or mime_type or "a file of unknown type"


def read_document(
    data: bytes, kind: str, max_chars: int, max_pages: int, limits: PdfLimits | None = None
) -> str:
    """The document's text, cut to `max_chars` with a note (see the module); a PDF's read in a
    child process under `limits`."""
    if kind == "pdf":
        try:
            return read_pdf(data, max_chars, max_pages, limits or PdfLimits())
        except PdfLimitExceeded as exc:
            raise DocumentProblem(str(exc)) from None  # "it needs more than 512 MB ..."
    return read_here(data, kind, max_chars, max_pages)


def read_here(data: bytes, kind: str, max_chars: int, max_pages: int) -> str:
    """`read_document` in this process, with no limits: for the PDF reader's child process."""
    if kind == "pdf":
        text = _pdf_text(data, max_pages)
    else:
        text = _decoded(data)
        if kind == "json":
            try:
                json.loads(text)
            except ValueError as exc:
                raise DocumentProblem(f"the JSON file is not valid JSON ({exc})") from None
    if not text.strip():
        raise DocumentProblem(
            "I found no text in it (a scanned PDF holds pictures of pages; send them as photos)"
        )
    if len(text) > max_chars:
        text = (
            text[:max_chars]
            + f"\n\n[Note: the document was cut; it has {len(text)} characters and only the "
            f"first {max_chars} are shown. Tell the user if the rest matters.]"
        )
    return text


def _decoded(data: bytes) -> str:
    if b"\x00" in data[:4096] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DocumentProblem("the file is binary, not text")
    for encoding in (
        ("utf-8-sig", "utf-16") if data.startswith((b"\xff\xfe", b"\xfe\xff")) else ("utf-8-sig",)
    ):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            pass
    return data.decode("cp1252", errors="replace")  # old Windows files: better than nothing


def _pdf_text(data: bytes, max_pages: int) -> str:
    # pypdf is imported only here, in the child process that reads the PDF (pdf_sandbox.py).
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError, PdfReadError

    # pypdf logs each oddity of a sloppy PDF as a warning: not Bruce's logs' business.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                reader.decrypt("")
            except Exception:
                raise DocumentProblem("the PDF is password-protected") from None
        pages = reader.pages
        shown = min(len(pages), max_pages)
        texts = [f"[page {n + 1}]\n{pages[n].extract_text() or ''}" for n in range(shown)]
    except DocumentProblem:
        raise
    except LimitReachedError as exc:  # pypdf's own limits (decompressed size, tokens, ...)
        raise DocumentProblem(f"it goes past the PDF reader's safety limits ({exc})") from None
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise DocumentProblem(f"the PDF is damaged or not a PDF ({exc})") from None
    if not any(text.split("\n", 1)[1].strip() for text in texts):
        return ""
    if len(pages) > shown:
        texts.append(f"[Note: only the first {shown} of {len(pages)} pages were read.]")
    return "\n\n".join(texts)
