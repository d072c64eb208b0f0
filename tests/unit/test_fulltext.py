"""storage/fulltext.py on its own: the words a memory search looks for, and how FTS5 gets them."""

from __future__ import annotations

from bruce_bot.storage.fulltext import fts5_any, search_terms


def test_searches_look_for_the_distinct_telling_words_quoted_for_fts5() -> None:
    assert search_terms("What's my wife's name? And my WIFE's birthday!") == [
        "wife",
        "name",
        "birthday",
    ]
    # English words too common to tell anything are left out ("do" among them).
    assert search_terms("Olá, você lembra do meu café?") == [
        "olá",
        "você",
        "lembra",
        "meu",
        "café",
    ]
    assert search_terms("") == [] and search_terms("?!:*()") == []
    assert fts5_any(["near", "or", "café"]) == '"near" OR "or" OR "café"'
