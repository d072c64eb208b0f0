"""How strong a `web.auth_token` is: a rough, documented estimate of its randomness (SECURITY.md)
that the schema's checks and `bruce doctor` use to refuse a guessable token off loopback."""

from __future__ import annotations

import math

# ---- web.auth_token strength ---------------------------------------------------------------
# A rough, documented estimate (SECURITY.md): a token guarding a web app reachable from
# the network must be at least MIN_TOKEN_CHARS long, use MIN_TOKEN_DISTINCT_CHARS different
# characters, and keep MIN_TOKEN_BITS of estimated randomness once the guessable parts are set
# aside: a repeated block counts once, and common words (WEAK_TOKEN_WORDS), a character equal to
# the one before it and sequences of 4 or more (abcd, 4321, qwer) count for nothing. The rest
# counts log2(alphabet) bits a character, the alphabet being the classes it uses (26 lower case,
# 26 upper case, 10 digits, 33 others). `bruce token` prints one that passes (token_urlsafe(32)).

MIN_TOKEN_CHARS = 32
MIN_TOKEN_DISTINCT_CHARS = 10
MIN_TOKEN_BITS = 128
WEAK_TOKEN_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "admin",
    "administrator",
    "bruce",
    "dashboard",
    "letmein",
    "changeme",
    "welcome",
    "default",
    "example",
    "login",
    "master",
    "qwerty",
    "iloveyou",
    "monkey",
    "dragon",
    "sunshine",
    "princess",
    "football",
    "baseball",
    "trustno1",
    "hello",
    "test",
    "private",
    "access",
    "superuser",
    "root",
)
_SEQUENCES = (
    "abcdefghijklmnopqrstuvwxyz",
    "0123456789",
    "qwertyuiop",
    "asdfghjkl",
    "zxcvbnm",
)
_CLASS_SIZES = ((str.islower, 26), (str.isupper, 26), (str.isdigit, 10))
_OTHER_CLASS_SIZE = 33


def _shortest_period(text: str) -> str:
    """The block `text` repeats ("abcabcab" -> "abc"), or `text` itself."""
    for size in range(1, len(text) // 2 + 1):
        if all(text[i] == text[i - size] for i in range(size, len(text))):
            return text[:size]
    return text


def _sequence_step(a: str, b: str) -> int:
    """+1 or -1 when `b` follows or precedes `a` in a sequence (alphabet, digits, keyboard row)."""
    for sequence in _SEQUENCES:
        i, j = sequence.find(a), sequence.find(b)
        if i != -1 and j != -1 and abs(j - i) == 1:
            return j - i
    return 0


def _guessable_mask(text: str) -> list[bool]:
    """For each character of `text` (lower case), whether it is part of a guessable pattern."""
    mask = [False] * len(text)
    for word in WEAK_TOKEN_WORDS:
        start = text.find(word)
        while start != -1:
            mask[start : start + len(word)] = [True] * len(word)
            start = text.find(word, start + 1)
    for i in range(1, len(text)):
        if text[i] == text[i - 1]:  # "aaaa": only the first one counts
            mask[i] = True
    i = 0
    while i < len(text) - 1:
        step = _sequence_step(text[i], text[i + 1])
        if not step:
            i += 1
            continue
        j = i + 1
        while j + 1 < len(text) and _sequence_step(text[j], text[j + 1]) == step:
            j += 1
        if j - i + 1 >= 4:  # "abcd", "9876", "qwer"
            mask[i : j + 1] = [True] * (j - i + 1)
        i = j
    return mask


def token_bits(token: str) -> int:
    """Estimated bits of randomness of `token` (see the rules above)."""
    block = _shortest_period(token)
    lowered = "".join(c.lower() if len(c.lower()) == 1 else c for c in block)
    rest = [
        c for c, guessable in zip(block, _guessable_mask(lowered), strict=True) if not guessable
    ]
    if not rest:
        return 0
    alphabet = sum(size for test, size in _CLASS_SIZES if any(test(c) for c in rest))
    if any(not (c.islower() or c.isupper() or c.isdigit()) for c in rest):
        alphabet += _OTHER_CLASS_SIZE
    return int(len(rest) * math.log2(max(alphabet, 2)))


def token_weakness(token: str) -> str | None:
    """Why `token` is too weak to guard a web app open to the network, or None when it is not."""
    if len(token) < MIN_TOKEN_CHARS:
        return f"it is {len(token)} characters long; at least {MIN_TOKEN_CHARS} are needed"
    distinct = len(set(token))
    if distinct < MIN_TOKEN_DISTINCT_CHARS:
        return (
            f"it uses only {distinct} different character{'s' if distinct > 1 else ''}; a "
            f"random token uses at least {MIN_TOKEN_DISTINCT_CHARS}"
        )
    bits = token_bits(token)
    if bits < MIN_TOKEN_BITS:
        return (
            f"it looks guessable: once common words, repeats and sequences (like 'password', "
            f"'aaaa', '1234') are set aside, about {bits} bits of randomness are left; at least "
            f"{MIN_TOKEN_BITS} are needed"
        )
    return None


TOKEN_HOW_TO = (
    "make one with `bruce token` and set it (e.g. `export BRUCE_WEB_TOKEN=$(bruce token)` with "
    "web.auth_token: ${BRUCE_WEB_TOKEN})"
)
