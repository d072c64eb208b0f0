"""tools/memory.py's rule for what may not be saved: what counts as a secret, by kind."""

from __future__ import annotations

import pytest

from bruce_bot.tools.memory import secret_kind


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("My password is hunter2", "a password or PIN"),
        ("senha: abc123", "a password or PIN"),
        ("Bank PIN = 4471", "a password or PIN"),
        ("the door code is 1234#", "a password or PIN"),
        ("key sk-ant-api03-abcdefghijklmnopqrstuvwxyz", "an API key or access token"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "an API key or access token"),
        ("AKIAIOSFODNN7EXAMPLE is the AWS one", "an API key or access token"),
        ("-----BEGIN OPENSSH PRIVATE KEY----- b3Blb", "an API key or access token"),
        ("token 9f8e7d6c5b4a39281706f5e4d3c2b1a0ffeeddcc", "an API key or access token"),
        ("Visa 4111-1111-1111-1111 exp 12/29", "a card number"),
        ("card 5500 0000 0000 0004", "a card number"),
    ],
)
def test_secrets_are_recognised_by_kind(text: str, kind: str) -> None:
    assert secret_kind(text) == kind


@pytest.mark.parametrize(
    "text",
    [
        "Is vegetarian and allergic to peanuts",
        "Her phone number is +351 912 345 678",  # not a card: Luhn fails
        "Daughter Ana born 2019-05-04, son Rui born 2021",
        "Works on the Bruce project at https://example.com/bruce/docs",
        "Prefers short answers; pin the important bits at the top",  # "pin" as a verb
        "Forgot the password once and hates resetting it",  # talks about a password, holds none
    ],
)
def test_ordinary_facts_are_no_secrets(text: str) -> None:
    assert secret_kind(text) is None
