"""Skills and workflows: the markdown instructions the analytical brain can switch on for a session.

A *skill* is know-how the agent should apply while it is active (how to research and cite, how to
write a good HTML report); several can be active at once. A *workflow* is a multi-step procedure
(research → outline → report); one at a time. Both are markdown files that open with a small YAML
front matter::

    ---
    name: research
    description: How to search the web, compare sources and cite them.
    ---
    The instructions, in markdown...

Where they come from, later overriding earlier by name: the built-ins shipped in
`bruce_bot/agent/brain/builtin/`, then every folder of `skills.dirs` in order. Inside a folder,
skills live in `skills/` and workflows in `workflows/`, each as `<name>.md` or as
`<name>/SKILL.md` (`<name>/WORKFLOW.md`), the layout of Anthropic's agent skills. A file that
cannot be used is skipped with a log line that names it and the problem; it never stops start-up.
The library is read once, at start-up (`load_library`, blocking: run it in a thread).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog
import yaml

log = structlog.get_logger(__name__)

Kind = Literal["skill", "workflow"]
BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"
NAME_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 500
MAX_FILE_BYTES = 64 * 1024  # a skill's text goes into every prompt while it is active
_FOLDERS: dict[Kind, tuple[str, str]] = {
    "skill": ("skills", "SKILL.md"),
    "workflow": ("workflows", "WORKFLOW.md"),
}
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*\r?$\n?", re.DOTALL | re.MULTILINE)


class MalformedFile(Exception):
    """Why a skill or workflow file cannot be used (logged, then the file is skipped)."""


@dataclass(frozen=True, slots=True)
class Document:
    """One skill or workflow: what the brain chooses by, and what the agent is then given."""

    kind: Kind
    name: str
    description: str
    content: str
    source: Path


@dataclass(frozen=True, slots=True)
class Library:
    skills: Mapping[str, Document] = field(default_factory=dict)
    workflows: Mapping[str, Document] = field(default_factory=dict)


def parse_document(text: str, kind: Kind, source: Path) -> Document:
    """A document from a file's text; raises `MalformedFile` saying what is wrong."""
    match = _FRONT_MATTER.match(text.lstrip("\ufeff"))
    if match is None:
        raise MalformedFile(
            "no front matter: the file must start with a line '---', then 'name:' and "
            "'description:' lines, then another '---'"
        )
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        problem = str(exc).replace("\n", " ")
        raise MalformedFile(f"the front matter is not valid YAML ({problem})") from None
    if not isinstance(meta, dict):
        raise MalformedFile("the front matter must be 'key: value' lines (name, description)")
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not name.strip():
        raise MalformedFile("'name' is missing from the front matter")
    name = name.strip()
    if len(name) > MAX_NAME_CHARS or not NAME_PATTERN.match(name):
        raise MalformedFile(
            f"name {name!r} is not allowed: use lowercase letters, digits and hyphens "
            f"(like 'writing-reports'), at most {MAX_NAME_CHARS} characters"
        )
    if not isinstance(description, str) or not description.strip():
        raise MalformedFile("'description' is missing from the front matter")
    description = " ".join(description.split())
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise MalformedFile(
            f"the description has {len(description)} characters; keep it under "
            f"{MAX_DESCRIPTION_CHARS} (it is only what the brain chooses by)"
        )
    content = text[match.end() :].strip()
    if not content:
        raise MalformedFile("there are no instructions after the front matter")
    return Document(kind, name, description, content, source)


def read_document(path: Path, kind: Kind) -> Document:
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise MalformedFile(f"the file has {size} bytes; at most {MAX_FILE_BYTES} are allowed")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise MalformedFile("the file is not UTF-8 text") from None
    return parse_document(text, kind, path)


def _candidates(folder: Path, marker: str) -> list[Path]:
    """`<name>.md` files and `<name>/<marker>` files of a skills/ or workflows/ folder."""
    found: list[Path] = []
    for entry in sorted(folder.iterdir()):
        if entry.is_file() and entry.suffix.lower() == ".md":
            found.append(entry)
        elif entry.is_dir() and (entry / marker).is_file():
            found.append(entry / marker)
    return found


def _read_folder(root: Path, kind: Kind) -> dict[str, Document]:
    subfolder, marker = _FOLDERS[kind]
    folder = root / subfolder
    documents: dict[str, Document] = {}
    if not folder.is_dir():
        return documents
    for path in _candidates(folder, marker):
        try:
            document = read_document(path, kind)
        except MalformedFile as exc:
            log.warning("brain_library_file_skipped", file=str(path), kind=kind, problem=str(exc))
            continue
        except OSError as exc:
            log.warning(
                "brain_library_file_skipped",
                file=str(path),
                kind=kind,
                problem=f"unreadable: {exc}",
            )
            continue
        if document.name in documents:
            log.warning(
                "brain_library_file_skipped",
                file=str(path),
                kind=kind,
                problem=(
                    f"another {kind} in the same folder is already named '{document.name}' "
                    f"({documents[document.name].source})"
                ),
            )
            continue
        documents[document.name] = document
    return documents


def load_library(dirs: Iterable[Path] = (), *, builtin: Path | None = BUILTIN_DIR) -> Library:
    """The built-in skills and workflows, then those of `dirs`: a later one wins by name."""
    roots = ([builtin] if builtin is not None else []) + [Path(d) for d in dirs]
    skills: dict[str, Document] = {}
    workflows: dict[str, Document] = {}
    for root in roots:
        if not root.is_dir():
            log.warning(
                "brain_library_dir_missing",
                dir=str(root),
                problem="not a folder; fix skills.dirs in config.yml or create it",
            )
            continue
        subfolders = [name for name, _ in _FOLDERS.values()]
        if not any((root / name).is_dir() for name in subfolders):
            log.warning(
                "brain_library_dir_empty",
                dir=str(root),
                problem="has no skills/ or workflows/ subfolder; put the .md files in those",
            )
            continue
        targets: tuple[tuple[Kind, dict[str, Document]], ...] = (
            ("skill", skills),
            ("workflow", workflows),
        )
        for kind, target in targets:
            for name, document in _read_folder(root, kind).items():
                if name in target:
                    log.info(
                        "brain_library_overridden",
                        kind=kind,
                        name=name,
                        file=str(document.source),
                        replaces=str(target[name].source),
                    )
                target[name] = document
    log.info("brain_library_loaded", skills=sorted(skills), workflows=sorted(workflows))
    return Library(skills=skills, workflows=workflows)
