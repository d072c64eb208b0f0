"""The layer rules of docs/architecture.md, checked on the real import graph (grimp).

Bruce's parts import one way: the core (domain, text, storage) knows no channel, tool or
agent; channel adapters see only the domain and their port, never the inbox, the outbox or a
database; tools and the web dashboard never reach into the agent. No two parts import each
other, directly or through others. A rule broken here names the chain that breaks it. And the
table of docs/architecture.md is the truth: every module has its row, and a part imports only
what its "may import" column names (its own part aside).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import cache
from pathlib import Path

import grimp
import pytest

PACKAGE = "bruce_bot"


@cache
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, cache_dir=None)  # a stale cache once hid a change


def part(module: str) -> str:
    """The part a module belongs to: a subpackage (bruce_bot.agent) or a top-level module."""
    return ".".join(module.split(".")[:2])


def parts_imported() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for module in graph().modules:
        for imported in graph().find_modules_directly_imported_by(module):
            if PACKAGE not in (part(module), part(imported)) and part(module) != part(imported):
                edges[part(module)].add(part(imported))
    return edges


def chain(importer: str, imported: str) -> list[str] | None:
    chains = graph().find_shortest_chains(importer, imported, as_packages=True)
    return min(chains, key=len) if chains else None  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("importer", "forbidden"),
    [
        # The inbox and the outbox (messaging/): an adapter sees its InboxPort only.
        ("bruce_bot.channels", "bruce_bot.messaging"),
        ("bruce_bot.channels", "bruce_bot.storage"),
        ("bruce_bot.tools", "bruce_bot.agent"),
        ("bruce_bot.web", "bruce_bot.agent"),
        ("bruce_bot.storage", "bruce_bot.agent"),
        ("bruce_bot.storage", "bruce_bot.channels"),
        ("bruce_bot.llm", "bruce_bot.storage"),
        ("bruce_bot.domain", "bruce_bot.storage"),
        ("bruce_bot.usage", "bruce_bot.agent"),
        ("bruce_bot.usage", "bruce_bot.web"),
        # The sandbox runs code and knows nothing of who asked for it.
        ("bruce_bot.sandbox", "bruce_bot.agent"),
        ("bruce_bot.sandbox", "bruce_bot.tools"),
        ("bruce_bot.sandbox", "bruce_bot.storage"),
        ("bruce_bot.sandbox", "bruce_bot.channels"),
    ],
)
def test_a_layer_never_imports_what_it_must_not(importer: str, forbidden: str) -> None:
    found = chain(importer, forbidden)
    assert found is None, f"{importer} must not import {forbidden}: " + " -> ".join(found or ())


def test_no_two_parts_import_each_other_even_through_others() -> None:
    edges = parts_imported()
    cycles: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for following in sorted(edges.get(path[-1], ())):
            if following == path[0]:
                cycles.append([*path, following])
            elif following not in path and following > path[0]:  # each cycle once
                walk([*path, following])

    for start in sorted(edges):
        walk([start])
    assert not cycles, "import cycles between parts: " + "; ".join(" -> ".join(c) for c in cycles)


def test_nothing_but_the_entry_points_imports_the_command_line() -> None:
    # The runtime never depends on the CLI: what both need (the LLM probe, say) lives outside it.
    cli, entry = f"{PACKAGE}.cli", f"{PACKAGE}.__main__"

    def allowed(module: str) -> bool:
        return module in (cli, entry) or module.startswith(f"{cli}.")

    commands = {module for module in graph().modules if allowed(module)}
    strays = sorted(
        f"{importer} -> {module}"
        for module in commands
        for importer in graph().find_modules_that_directly_import(module)
        if not allowed(importer)
    )
    assert cli in commands, f"no {cli}: is the rule still needed?"
    assert not strays, f"only {cli}.* and {entry} may import the command line: {strays}"


def test_a_channel_formatter_loads_no_database_library() -> None:
    # An adapter never sees a database: importing the Telegram markup must not pull SQLAlchemy.
    probe = (
        "import sys, bruce_bot.channels.telegram.markup; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'alembic')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout


@cache
def graph_with_externals() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, include_external_packages=True, cache_dir=None)


@pytest.mark.parametrize(
    ("sdk", "owners"),
    [
        ("telegram", ("bruce_bot.channels.telegram.",)),
        ("discord", ("bruce_bot.channels.discord.",)),
        ("nio", ("bruce_bot.channels.matrix.",)),
        ("slack_sdk", ("bruce_bot.channels.slack.",)),
        ("anthropic", ("bruce_bot.llm.anthropic",)),
        ("openai", ("bruce_bot.llm.openai",)),
        ("mcp", ("bruce_bot.mcp_client.connection",)),
        ("mcp_types", ("bruce_bot.mcp_client.connection",)),
    ],
)
def test_each_platform_sdk_is_imported_by_its_own_modules_only(
    sdk: str, owners: tuple[str, ...]
) -> None:
    importers = graph_with_externals().find_modules_that_directly_import(sdk)
    strays = sorted(module for module in importers if not module.startswith(owners))
    assert not strays, f"{sdk} is imported outside {', '.join(owners)}*: {strays}"
    assert importers, f"nothing imports {sdk}: is the rule still needed?"


# ---- the table of docs/architecture.md, enforced --------------------------------------------

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
NAMED = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class TableRow:
    """One row of "The parts and what they may import": its parts and what they may import
    (None: everything)."""

    parts: tuple[str, ...]
    allowed: tuple[str, ...] | None


def _module_name(named: str) -> str:
    return f"{PACKAGE}.{named.removesuffix('/').removesuffix('.py').replace('/', '.')}"


@cache
def table() -> tuple[TableRow, ...]:
    rows: list[TableRow] = []
    lines = ARCHITECTURE.read_text().splitlines()
    start = lines.index("| part | its job | may import |")
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        first, _job, may_import = (cell.strip() for cell in line.strip("|").split("|"))
        parts = tuple(_module_name(named) for named in NAMED.findall(first))
        allowed_text = may_import.split("never")[0]
        allowed: tuple[str, ...] | None = (
            None
            if allowed_text.strip().startswith("everything")
            else tuple(_module_name(named) for named in NAMED.findall(allowed_text))
        )
        rows.append(TableRow(parts, allowed))
    return tuple(rows)


def _within(module: str, part: str) -> bool:
    return module == part or module.startswith(part + ".") or fnmatch(module, part)


def row_of(module: str) -> TableRow | None:
    """The row naming the module's part (the most specific one)."""
    owning = [(len(part), row) for row in table() for part in row.parts if _within(module, part)]
    return max(owning, key=lambda found: found[0])[1] if owning else None


def test_every_module_has_its_row_in_the_table() -> None:
    # Precondition: the table is read (a changed header would leave nothing to check).
    assert len(table()) > 15 and all(row.parts for row in table())
    homeless = sorted(
        module
        for module in graph().modules
        if module != PACKAGE and not module.endswith("__main__") and row_of(module) is None
    )
    assert not homeless, f"modules no row of docs/architecture.md's table names: {homeless}"


def test_a_part_imports_only_what_its_row_allows() -> None:
    strays: list[str] = []
    for module in sorted(graph().modules):
        row = row_of(module)
        if row is None or row.allowed is None:
            continue
        for imported in sorted(graph().find_modules_directly_imported_by(module) - {PACKAGE}):
            if row_of(imported) is row or any(_within(imported, a) for a in row.allowed):
                continue
            strays.append(f"{module} -> {imported}")
    assert not strays, (
        "imports docs/architecture.md's 'may import' column does not allow (add the part to "
        "the column if the dependency is meant, else remove it): " + "; ".join(strays)
    )
