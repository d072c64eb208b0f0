"""Full-text search over memories: the index DDL of each database and the queries' terms.

The index is no SQLAlchemy model, so its statements live here, the one source for migration
0010 (SQLite and PostgreSQL) and for `fresh_schema` (a new SQLite file). SQLite gets an FTS5
table with external content (`memories` holds the text once) kept in step by three triggers;
PostgreSQL gets a GIN index on the `simple` configuration's tsvector of the text and tags (no
stemming, no stop words: memories in any language are found by their words). A person's words
reach FTS5 as quoted terms only: FTS5 has a query syntax of its own (AND, NEAR, `*`, column
filters, quotes), and a user's "what's my wife's name?" must not be read as one.
"""

from __future__ import annotations

import re
from typing import Any, Final

FTS_TABLE: Final = "memories_fts"
# FTS5's virtual table and the shadow tables it keeps its index in: not models, so alembic's
# autogenerate and the schema comparisons leave them alone.
SQLITE_FTS_TABLES: Final = frozenset(
    {FTS_TABLE, *(f"{FTS_TABLE}_{shadow}" for shadow in ("data", "idx", "docsize", "config"))}
)
_COLUMNS = "content, tags"
SQLITE_DDL: Final = (
    # remove_diacritics 2: "café" and "cafe" are one word.
    f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5({_COLUMNS}, content='memories', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    f"CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, {_COLUMNS}) VALUES (new.id, new.content, new.tags); END",
    f"CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, {_COLUMNS}) "
    "VALUES ('delete', old.id, old.content, old.tags); END",
    f"CREATE TRIGGER memories_fts_update AFTER UPDATE ON memories BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, {_COLUMNS}) "
    "VALUES ('delete', old.id, old.content, old.tags); "
    f"INSERT INTO {FTS_TABLE}(rowid, {_COLUMNS}) VALUES (new.id, new.content, new.tags); END",
)
SQLITE_DROP: Final = (
    "DROP TRIGGER IF EXISTS memories_fts_update",
    "DROP TRIGGER IF EXISTS memories_fts_delete",
    "DROP TRIGGER IF EXISTS memories_fts_insert",
    f"DROP TABLE IF EXISTS {FTS_TABLE}",
)
# The expression the index is built on; queries must spell it the same to use the index.
POSTGRES_DOCUMENT: Final = "to_tsvector('simple', memories.content || ' ' || memories.tags::text)"
POSTGRES_INDEX: Final = "ix_memories_search"
POSTGRES_DDL: Final = (
    f"CREATE INDEX {POSTGRES_INDEX} ON memories USING gin "
    "((to_tsvector('simple', content || ' ' || tags::text)))",
)
POSTGRES_DROP: Final = (f"DROP INDEX IF EXISTS {POSTGRES_INDEX}",)


def described_by_models(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """alembic's `include_object`: False for the full-text index, which no model describes (so
    autogenerate and schema comparisons leave it alone)."""
    if type_ == "table" and name in SQLITE_FTS_TABLES:
        return False
    return not (type_ == "index" and name == POSTGRES_INDEX)


_WORD = re.compile(r"\w+", re.UNICODE)
# Words too common to say what a message is about (English; other languages pass whole, and
# the ranking weighs common words down anyway).
STOP_WORDS: Final = frozenset(
    """a about all also am an and any are as at be been but by can could did do does for from
    had has have he her him his how i if in into is it its just me my no not of on or our she
    so than that the their them then there they this to too up us was we were what when where
    which who why will with would you your""".split()
)
MAX_TERMS: Final = 24


def search_terms(text: str) -> list[str]:
    """The distinct words of `text`, lower case, in order: the terms a search looks for."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if len(word) == 1 and word.isascii():
            continue  # the "s" of "wife's", a lone digit: matches too much to mean anything
        if word.strip("_") and word not in STOP_WORDS:
            seen.setdefault(word, None)
    return list(seen)[:MAX_TERMS]


def fts5_any(terms: list[str]) -> str:
    """An FTS5 query matching any of `terms`, each quoted (a `\\w+` word holds no quote)."""
    return " OR ".join(f'"{term}"' for term in terms)
