"""docs/design.md keeps up with the code: every config key, `bruce` command and option, tool,
HTTP route and table the code has is named there, in backticks, where a reader looks for it.

The code is read, not a list kept here: the pydantic config models walked field by field, the
argparse parser of `bruce`, the default tool registry as parts.py builds it plus every `Tool`
subclass a config can switch on and the `ToolSpec`s offered outside the registry, the route table
of the Starlette app built without a network, and the SQLAlchemy metadata. A failure names what
is missing and the heading of docs/design.md to add it under.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel
from starlette.routing import BaseRoute, Route

from bruce_bot import platforms
from bruce_bot.channels.web.channel import WebChannel
from bruce_bot.cli import build_parser
from bruce_bot.config import AppConfig, Config
from bruce_bot.domain import ToolSpec, utcnow
from bruce_bot.mcp_client.tools import McpTool
from bruce_bot.parts import assemble_tools
from bruce_bot.storage.database import SCHEMA_HEAD, Database
from bruce_bot.storage.models import Base
from bruce_bot.storage.stores import Stores
from bruce_bot.tools.registry import Tool
from bruce_bot.web.app import WebContext, create_app
from bruce_bot.web.auth import OPEN_PATHS
from bruce_bot.web.lazy_routes import LazyRoutes

ROOT = Path(__file__).resolve().parents[2]
DOC_PATH = ROOT / "docs" / "design.md"
DOC = DOC_PATH.read_text(encoding="utf-8")
PLACEHOLDER = "<name>"  # a name the owner chooses: usage.prices.<name>, mcp.servers.<name>
_CODE = re.compile(r"`([^`]+)`")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


# ---- reading the page ------------------------------------------------------------------------


def part(number: int) -> str:
    """The text of `## <number>. ...` up to the next `## ` heading."""
    match = re.search(rf"^## {number}\. .*?(?=^## |\Z)", DOC, re.MULTILINE | re.DOTALL)
    assert match, f"docs/design.md has no heading '## {number}. ...'"
    return match.group(0)


def rows(text: str) -> list[list[str]]:
    """The cells of every table row in `text` (escaped pipes `\\|` stay inside a cell)."""
    found = []
    for line in text.splitlines():
        if line.startswith("|"):
            found.append([cell.strip() for cell in _CELL_SPLIT.split(line.strip().strip("|"))])
    return found


def first_code(cell: str) -> str | None:
    match = _CODE.search(cell)
    return match.group(1) if match else None


def rows_by_name(text: str) -> dict[str, list[str]]:
    """Table rows keyed by the first backticked name of their first cell."""
    keyed = {}
    for cells in rows(text):
        name = first_code(cells[0])
        if name is not None:
            keyed[name] = cells
    return keyed


def missing(what: str, names: list[str], where: str) -> str:
    listed = "\n".join(f"  - {name}" for name in names)
    return f"docs/design.md does not name these {what}:\n{listed}\nAdd them {where}."


# ---- config ----------------------------------------------------------------------------------


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, UnionType):  # `Section | None`
        models = [m for m in map(_model_of, get_args(annotation)) if m is not None]
        return models[0] if models else None
    return None


def config_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key a user can write, dotted (`llm.thinking.enabled`); a key holding a map of
    sections (`mcp.servers`) is one key, its sections' keys sit under `<name>`."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{field.alias or name}"
        section = _model_of(field.annotation)
        if section is not None:
            yield from config_keys(section, f"{path}.")
            continue
        yield path
        if get_origin(field.annotation) is dict:
            value = _model_of(get_args(field.annotation)[1])
            if value is not None:
                yield from config_keys(value, f"{path}.{PLACEHOLDER}.")


def all_config_keys() -> set[str]:
    """`config_keys(Config)` and the keys of the built-in platforms whose sections are not
    fields of `channels` (bruce_bot/platforms.py: `channels.matrix`)."""
    keys = set(config_keys(Config))
    fields = Config.model_fields["channels"].annotation.model_fields  # type: ignore[union-attr]
    for spec in platforms.BUILT_IN:
        if spec.name not in fields:
            keys |= set(config_keys(spec.section_model(), f"channels.{spec.name}."))
    return keys


def documented_config() -> tuple[set[str], dict[str, str]]:
    """The dotted keys §2 documents (a `### \\`section\\`` heading, then rows of its keys) and
    each heading's text by its section path."""
    keys: set[str] = set()
    blocks: dict[str, str] = {}
    pieces = re.split(r"^### ", part(2), flags=re.MULTILINE)[1:]
    for piece in pieces:
        heading, _, body = piece.partition("\n")
        section = first_code(heading)
        if section is None:
            continue
        blocks[section] = body
        keys |= {f"{section}.{name}" for name in rows_by_name(body)}
    return keys, blocks


def test_every_config_section_has_a_heading() -> None:
    _, blocks = documented_config()
    absent = [
        name
        for name in Config.model_fields
        if not any(s == name or s.startswith(f"{name}.") for s in blocks)
    ]
    assert not absent, missing(
        "top-level config sections", absent, "in '## 2. Configuration' as '### `<section>`'"
    )


def test_every_config_key_has_a_row() -> None:
    documented, blocks = documented_config()
    absent = sorted(all_config_keys() - documented)

    def home(key: str) -> str:
        section = max((s for s in blocks if key.startswith(f"{s}.")), key=len, default="")
        if not section:
            return f"{key} (a new '### `{key.split('.')[0]}`' table)"
        return f"{key} (row `{key[len(section) + 1 :]}` under '### `{section}`')"

    assert not absent, missing(
        "config keys", [home(key) for key in absent], "to '## 2. Configuration'"
    )


def test_every_config_row_is_a_key_the_code_has() -> None:
    documented, _ = documented_config()
    stale = sorted(documented - all_config_keys())
    assert not stale, (
        "docs/design.md '## 2. Configuration' has rows for keys bruce_bot/config/schema.py does "
        f"not have (renamed or removed? then CHANGELOG.md says so): {', '.join(stale)}"
    )


# ---- the command line ------------------------------------------------------------------------


def commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every runnable `bruce` command (`("db", "upgrade")`) with its parser."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        yield words, parser
        return
    for name, child in groups[0].choices.items():
        yield from commands(child, (*words, name))


def arguments_of(parser: argparse.ArgumentParser) -> list[str]:
    """How the command's options and positionals are written: `--config`, `CODE`."""
    shown = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if action.option_strings:
            shown.append(max(action.option_strings, key=len))
        else:
            shown.append(action.dest.upper())
    return shown


def test_every_command_and_option_is_in_the_command_table() -> None:
    written = [name for name in rows_by_name(part(3)) if name.startswith("bruce ")]
    problems = []
    for words, parser in commands(build_parser()):
        command = " ".join(("bruce", *words))
        usage = next((w for w in written if w == command or w.startswith(f"{command} ")), None)
        if usage is None:
            problems.append(f"{command} (a row `{command} ...`)")
            continue
        tokens = re.split(r"[\s\[\]|]+", usage)
        problems += [
            f"{command}: its argument {arg} (in its row's `{usage}`)"
            for arg in arguments_of(parser)
            if arg not in tokens
        ]
    assert not problems, missing("commands or options", problems, "to '## 3. Command line'")


# ---- tools -----------------------------------------------------------------------------------


def _subclasses(cls: type[Tool]) -> Iterator[type[Tool]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def tool_classes() -> dict[str, type[Tool]]:
    """Bruce's tools a config can switch on, the brain's too (MCP tools are the servers')."""
    return {
        cls.name: cls
        for cls in _subclasses(Tool)
        if "name" in vars(cls) and cls.__module__.startswith("bruce_bot.")
        if not issubclass(cls, McpTool)
    }


def fixed_specs() -> dict[str, ToolSpec]:
    """Tools offered to a model call outside the registry (a watch's `watch_verdict`): the
    `ToolSpec` values the modules of bruce_bot define."""
    return {
        value.name: value
        for name, module in list(sys.modules.items())
        if name.startswith("bruce_bot.") and module is not None
        for value in vars(module).values()
        if isinstance(value, ToolSpec)
    }


def test_every_tool_outside_the_registry_is_in_a_tool_table() -> None:
    import bruce_bot.scheduler.watching  # noqa: F401  (imported by parts.py already)

    table = rows_by_name(part(4))
    problems = []
    for name, spec in sorted(fixed_specs().items()):
        cells = table.get(name)
        if cells is None:
            problems.append(f"{name} (a row, under '### Tools of other model calls')")
            continue
        row = " | ".join(cells)
        problems += [
            f"{name}: its parameter `{parameter}` (in its row)"
            for parameter in spec.parameters.get("properties", {})
            if not re.search(rf"`{re.escape(parameter)}\??`", row)
        ]
    assert "watch_verdict" in fixed_specs(), "the ToolSpec search found nothing"
    assert not problems, missing("tools", problems, "to '## 4. Tools'")


async def test_every_tool_is_in_a_tool_table(tmp_path: Path) -> None:
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'bruce.db'}")
    try:
        stand_in: Any = None  # the tools keep the LLM and the confirmations until called
        registry = assemble_tools(Config(), Stores.open(database), stand_in, stand_in, None, utcnow)
    finally:
        await database.dispose()
    known = tool_classes()
    assert set(registry.names()) <= set(known), "a default tool is not a bruce_bot Tool class"
    table = rows_by_name(part(4))
    problems = []
    for name, cls in sorted(known.items()):
        cells = table.get(name)
        if cells is None:
            problems.append(f"{name} (a row, in the agent's or the brain's table)")
            continue
        row = " | ".join(cells)
        for parameter in cls.parameters.get("properties", {}):
            if not re.search(rf"`{re.escape(parameter)}\??`", row):
                problems.append(f"{name}: its parameter `{parameter}` (in its row)")
        if f"`{cls.effect}`" not in row:
            problems.append(f"{name}: its effect `{cls.effect}` (in its row)")
    if "<server>__<tool>" not in table:
        problems.append("<server>__<tool> (the MCP servers' tools)")
    assert not problems, missing("tools", problems, "to '## 4. Tools'")


# ---- routes ----------------------------------------------------------------------------------


def _flat(routes: list[BaseRoute]) -> Iterator[Route]:
    for route in routes:
        if isinstance(route, LazyRoutes):
            yield from _flat(list(route.routes))
        elif isinstance(route, Route):
            yield route


async def test_every_route_is_in_the_route_table_with_its_auth(tmp_path: Path) -> None:
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'bruce.db'}")
    try:
        context = WebContext(
            Stores.open(database), WebChannel(), "t" * 43, app=AppConfig(data_dir=tmp_path)
        )
        app = create_app(context)
        served = {
            (method, route.path)
            for route in _flat(app.routes)
            for method in route.methods or ()
            if method != "HEAD"
        }
    finally:
        await database.dispose()
    table = rows_by_name(part(5))
    problems = []
    for method, path in sorted(served, key=lambda pair: (pair[1], pair[0])):
        auth = "open" if path.startswith(OPEN_PATHS) else "token"
        cells = table.get(f"{method} {path}")
        if cells is None:
            problems.append(f"{method} {path} (a row `{method} {path}` | {auth} | ...)")
        elif len(cells) < 2 or cells[1] != auth:
            problems.append(f"{method} {path}: its auth is {auth} (second cell of its row)")
    assert not problems, missing("routes", problems, "to '## 5. HTTP routes'")


# ---- tables ----------------------------------------------------------------------------------


def test_every_table_and_column_is_in_the_table_list() -> None:
    table = rows_by_name(part(6))
    problems = []
    for name, schema in sorted(Base.metadata.tables.items()):
        cells = table.get(name)
        if cells is None:
            problems.append(f"{name} (a row: `{name}` | its columns)")
            continue
        row = " | ".join(cells[1:])
        problems += [
            f"{name}.{column.name} (as `{column.name}` in the row of `{name}`)"
            for column in schema.columns
            if f"`{column.name}`" not in row
        ]
    assert not problems, missing("tables or columns", problems, "to '## 6. Tables'")


def test_the_migration_head_is_the_code_s() -> None:
    head = re.search(r"migration head is `(\d+)`", part(6))
    assert head and head.group(1) == SCHEMA_HEAD, (
        f"docs/design.md '## 6. Tables' must say 'The migration head is `{SCHEMA_HEAD}`' "
        f"(SCHEMA_HEAD in bruce_bot/storage/database.py); it says {head and head.group(1)!r}"
    )


def test_nothing_cites_the_design_document_outside_the_repository() -> None:
    old = "DESIGN" + " §"  # the first design document, never part of the repository
    citing = [
        str(path.relative_to(ROOT))
        for folder in ("bruce_bot", "tests")
        for path in (ROOT / folder).rglob("*.py")
        if old in path.read_text(encoding="utf-8")
    ]
    assert not citing, f"cite docs/design.md instead of '{old}n' in: {', '.join(citing)}"
