"""The fence around outside text, in the core: what channel adapters can use without loading
tools (channels see only the core; see docs/architecture.md).

It writes exactly what `tools.registry.as_untrusted` writes (tests/unit/test_untrusted.py checks
that they agree): `<untrusted_content source="…">`, the text with any tag of the same name
inside it defused, `</untrusted_content>`. The model's guidelines say what is inside is data.
"""

from __future__ import annotations

import re

OPEN = '<untrusted_content source="{source}">\n'
CLOSE = "\n</untrusted_content>"
# Written inside the content, a closing tag would let the text end the boundary early.
_TAG_INSIDE = re.compile(r"<\s*/?\s*untrusted_content", re.IGNORECASE)


def fence(text: str, source: str) -> str:
    """`text` from the outside world, fenced so the model reads it as data."""
    return OPEN.format(source=source) + _TAG_INSIDE.sub("<untrusted-content-tag", text) + CLOSE
