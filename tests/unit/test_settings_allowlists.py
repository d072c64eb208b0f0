"""What an allowlist entry may be: a positive user id, as a number or its digits; anything else
is refused naming the entry's place and the fix (the API answers it as a 400)."""

from __future__ import annotations

import pytest

from bruce_bot.settings.allowlists import MAX_IDS, AllowlistRefused, parse_ids, parser_of


def test_ids_as_numbers_or_digits_are_kept_sorted_once() -> None:
    assert parse_ids(["42", 7, " 700000000000000123 ", 42]) == [7, 42, 700000000000000123]
    assert parse_ids([]) == []


@pytest.mark.parametrize(
    ("entry", "index"),
    [("bob", 1), ("-5", 1), (0, 1), ("1.5", 1), (True, 1), (None, 1), ("", 1), (2**64, 1)],
)
def test_a_wrong_entry_is_named_with_its_place(entry: object, index: int) -> None:
    with pytest.raises(
        AllowlistRefused, match=rf"allowed_user_ids\[{index}\]: .* is not a user id"
    ):
        parse_ids(["1", entry])


def test_too_many_ids_are_refused() -> None:
    with pytest.raises(AllowlistRefused, match=f"at most {MAX_IDS}"):
        parse_ids(["1"] * (MAX_IDS + 1))


def test_matrix_and_slack_ids_are_text_of_their_platforms_shape() -> None:
    matrix, slack = parser_of("matrix"), parser_of("slack")
    assert matrix([" @bob:example.org", "@alice:ex.org:8448", "@bob:example.org"]) == [
        "@alice:ex.org:8448",
        "@bob:example.org",
    ]
    with pytest.raises(AllowlistRefused, match=r"allowed_user_ids\[1\]: 'alice' is not a Matrix"):
        matrix(["@a:b.org", "alice"])
    assert slack(["U012ABCDEF", " W0987654321 "]) == ["U012ABCDEF", "W0987654321"]
    with pytest.raises(AllowlistRefused, match=r"'@bob:example.org' is not a Slack user id. One "):
        slack(["@bob:example.org"])
    assert parser_of("telegram") is parse_ids
