"""The house limits of docs/development.md, kept by a ratchet: no function over 60 lines (the
config schema aside), no constructor (`__init__`) over six parameters, no module in web/ over 300
lines, `Bruce.start` no longer than 40. The code over a limit today is listed with its size: a
new offender, or a listed one growing, fails; a listed one brought under the bar fails too until
it leaves the list, so the list only ever shrinks. Value records (dataclasses, pydantic models)
carry data, not collaborators, and are not constructors in this sense.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "bruce_bot"
MAX_FUNCTION_LINES = 60
MAX_CONSTRUCTOR_PARAMETERS = 6
MAX_WEB_MODULE_LINES = 300
EXEMPT_FROM_FUNCTION_LIMIT = {"bruce_bot/config/schema.py"}

MAX_START_LINES = 40  # Bruce.start reads as the start-up order, one step a line

# Over the bar today; "path:name" -> size. Empty since issue 25: keep it so.
KNOWN: dict[str, int] = {}


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def measure() -> dict[str, int]:
    """Everything over a limit now, keyed as in KNOWN."""
    over: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _relative(path)
        source = path.read_text()
        if "/web/" in name and (lines := len(source.splitlines())) > MAX_WEB_MODULE_LINES:
            over[f"module {name}"] = lines
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                        arguments = item.args
                        count = len(arguments.posonlyargs) + len(arguments.args) - 1
                        count += len(arguments.kwonlyargs)
                        if count > MAX_CONSTRUCTOR_PARAMETERS:
                            over[f"constructor {name}:{node.name}"] = count
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and name not in EXEMPT_FROM_FUNCTION_LIMIT:
                    over[f"function {name}:{node.name}"] = length
    return over


def test_nothing_new_goes_over_a_limit_and_nothing_listed_grows() -> None:
    over = measure()
    new = {key: size for key, size in over.items() if key not in KNOWN}
    grown = {key: (KNOWN[key], size) for key, size in over.items() if size > KNOWN.get(key, size)}
    assert not new, f"over the house limits (split it; docs/development.md): {new}"
    assert not grown, f"already over the limits and grown (was, now): {grown}"


def test_the_list_of_known_offenders_only_shrinks() -> None:
    over = measure()
    fixed = sorted(key for key in KNOWN if key not in over)
    assert not fixed, f"under the bar now: remove from KNOWN in this file: {fixed}"


def test_the_measure_sees_what_it_measures() -> None:
    # Precondition: the walk finds the package and counts like the limits say.
    assert len(list(PACKAGE.rglob("*.py"))) > 100
    tree = ast.parse("class A:\n    def __init__(self, a, b, *, c):\n        pass\n")
    init = tree.body[0].body[0]  # type: ignore[attr-defined]
    assert len(init.args.args) - 1 + len(init.args.kwonlyargs) == 3


def test_the_start_up_order_reads_in_one_screen() -> None:
    tree = ast.parse((PACKAGE / "app.py").read_text())
    [start] = [
        item
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == "Bruce"
        for item in node.body
        if isinstance(item, ast.AsyncFunctionDef) and item.name == "start"
    ]
    assert start.end_lineno is not None
    length = start.end_lineno - start.lineno + 1
    assert length <= MAX_START_LINES, f"Bruce.start is {length} lines: move a step into a method"
