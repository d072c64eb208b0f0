"""The type check: mypy over bruce_bot/ with the settings of pyproject.toml ([tool.mypy]).

Strict for the core (domain, inbox, outbox, agent/, storage/), a baseline for the rest. It runs
here too, so the suite catches a type error wherever it is started from. With mypy's cache
(.mypy_cache/, shared with a `mypy` run from the command line) it takes a few seconds; a cold
cache costs about 45 s, most of it reading the SDKs' own types.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_bruce_type_checks_without_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the targets and the cache of [tool.mypy] are relative to it
    monkeypatch.delenv("MYPYPATH", raising=False)
    report, errors, status = api.run(["--config-file", os.fspath(ROOT / "pyproject.toml")])
    assert status == 0, f"mypy found errors:\n{report}{errors}"
