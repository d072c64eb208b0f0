"""Values that look like secrets by their shape alone, whatever key or field they came under.

A token pasted into the wrong key (`web.port: sk-...`) or printed by a child process to its
stderr is not one of the configured secrets the log scrubber knows, so it is recognised by its
form: the prefixes of the common API keys and bot tokens (OpenAI/Anthropic `sk-`, Slack `xox?-`
and `xapp-`, GitHub `ghp_`/`github_pat_`, AWS `AKIA`, Google `AIza`, a Telegram bot token
`123456:ABC...`, a JWT `eyJ...`), 32 or more hex digits, and any run of 20 or more token
characters that mixes letters and digits the way a random string does: it switches between upper
case, lower case and digits at least every 2.5 characters, or its Shannon entropy is at least 4.2
bits a character. A
random URL-safe token of 16 bytes or more is caught about 95 times in 100 (32 bytes: 999 in
1000); model names (`claude-3-5-haiku-latest`, `Qwen2.5-Coder-32B-Instruct`), paths and URLs are
not. Hiding a value that only looked random costs little: the message still names the key and
what is wrong.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter

HIDDEN_SHAPE = "(hidden: looks like a secret)"

_KNOWN = re.compile(
    r"(?:\bsk-[A-Za-z0-9_-]{12,}"  # OpenAI, Anthropic (sk-ant-...), DeepSeek, OpenRouter (sk-or-)
    r"|\bxox[abposre]-[A-Za-z0-9-]{10,}|\bxapp-[A-Za-z0-9-]{10,}"  # Slack: bot, user, app
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key id
    r"|\bAIza[0-9A-Za-z_-]{30,}"  # Google API key
    r"|\b[0-9]{5,12}:[A-Za-z0-9_-]{30,}"  # Telegram bot token
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWT (header.payload)
    r")"
)
_RUN = re.compile(r"[A-Za-z0-9_\-+=~]{20,}")
_HEX = re.compile(r"[0-9a-fA-F]{32,}")
MIN_SWITCH_RATE = 0.4  # random URL-safe text: about 0.6; words joined by dashes: under 0.4
MIN_ENTROPY_BITS = 4.2  # random URL-safe text: about 5 bits a character; model names about 4


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _kind(char: str) -> str:
    return "upper" if char.isupper() else "lower" if char.islower() else "digit"


def _switch_rate(run: str) -> float:
    kinds = [_kind(c) for c in run if c.isalnum()]
    if len(kinds) < 2:
        return 0.0
    return sum(a != b for a, b in itertools.pairwise(kinds)) / (len(kinds) - 1)


def _random_looking(run: str) -> bool:
    if _HEX.fullmatch(run):
        return True
    if not (any(c.isalpha() for c in run) and any(c.isdigit() for c in run)):
        return False
    return _switch_rate(run) >= MIN_SWITCH_RATE or _entropy(run) >= MIN_ENTROPY_BITS


def looks_secret(text: str) -> bool:
    """Whether `text` holds something shaped like a key or token anywhere in it."""
    if _KNOWN.search(text):
        return True
    return any(_random_looking(match[0]) for match in _RUN.finditer(text))


def mask_known_tokens(text: str) -> str:
    """`text` with the keys and tokens of known prefixes (`xoxb-`, `sk-`, a Telegram bot
    token...) replaced by `***`: cheap, and never a false alarm on an id or a hash, so every
    log line gets it (a token a library printed, or one the scrubber was never told of)."""
    return _KNOWN.sub("***", text)


def mask_secret_shapes(text: str) -> str:
    """`text` with every key- or token-shaped part replaced by `***`."""
    text = _KNOWN.sub("***", text)
    return _RUN.sub(lambda m: "***" if _random_looking(m[0]) else m[0], text)
