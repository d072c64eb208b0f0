"""Only one Bruce runs per data directory: a second one refuses to start and says why."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bruce_bot.app import Bruce, StartupError
from tests.conftest import make_config, running_bruce


async def test_a_second_instance_on_the_same_data_dir_refuses_to_start(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    async with running_bruce(config):
        second = Bruce(config)
        with pytest.raises(StartupError) as refused:
            await second.start()
    message = str(refused.value)
    assert "already running" in message and f"process {os.getpid()}" in message
    # Once the first one stopped, the data directory is free again.
    async with running_bruce(config):
        pass
