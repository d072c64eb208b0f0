"""Every relative link in the README, the docs and the other top-level documents leads somewhere:
the file exists and, for `file.md#anchor`, the heading does (GitHub's anchor rules)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [
    ROOT / "README.md",
    ROOT / "SECURITY.md",
    ROOT / "CHANGELOG.md",
    ROOT / "tests" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but - and _ dropped, spaces to -."""
    found: set[str] = set()
    for line in FENCE.sub("", markdown).splitlines():
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading:
            text = heading.group(1).strip().lower()
            slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
            found.add(slug)
    return found


def broken_links(document: Path) -> list[str]:
    text = FENCE.sub("", document.read_text())
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        if not linked.exists():
            broken.append(f"{target} (no file {linked.relative_to(ROOT)})")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
            broken.append(f"{target} (no heading #{anchor} in {linked.relative_to(ROOT)})")
    return broken


def test_every_relative_link_leads_to_a_file_and_heading() -> None:
    problems = {
        str(document.relative_to(ROOT)): broken
        for document in DOCUMENTS
        if (broken := broken_links(document))
    }
    assert not problems, f"broken links (fix the path or the heading): {problems}"


def test_the_anchor_rules_match_githubs() -> None:
    # Precondition of the test above: the slugs are GitHub's, or every anchor would look broken.
    assert anchors("## Web dashboard and API\n### `bruce doctor`\n## A/B: tests, chaos") == {
        "web-dashboard-and-api",
        "bruce-doctor",
        "ab-tests-chaos",
    }
