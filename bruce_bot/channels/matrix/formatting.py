"""Bruce's Markdown as a Matrix message: a plain `body` and an HTML `formatted_body`.

chatgpt-md-converter turns Markdown into a small set of tags (b, i, u, s, code, pre, a,
blockquote, and Telegram's spoiler), all within what the Matrix spec recommends clients render;
anything else in the text arrives escaped. Newlines become `<br>` outside `<pre>` (HTML
collapses them), and Telegram's spoiler becomes Matrix's `data-mx-spoiler`.
"""

from __future__ import annotations

import re

from chatgpt_md_converter import telegram_format

_PRE = re.compile(r"(<pre>.*?</pre>)", re.DOTALL)


def to_html(markdown: str) -> str:
    html = telegram_format(markdown)
    html = html.replace("<tg-spoiler>", "<span data-mx-spoiler>").replace(
        "</tg-spoiler>", "</span>"
    )
    pieces = _PRE.split(html)
    return "".join(
        piece if piece.startswith("<pre>") else piece.replace("\n", "<br>") for piece in pieces
    )


def message_content(text: str, msgtype: str = "m.text") -> dict[str, object]:
    """The event content of a reply: plain `body`, HTML `formatted_body`, and no mention pings
    (an empty `m.mentions`: whatever the model writes, nobody is notified by name)."""
    return {
        "msgtype": msgtype,
        "body": text,
        "format": "org.matrix.custom.html",
        "formatted_body": to_html(text),
        "m.mentions": {},
    }
