"""Starting Telegram in webhook mode: the settings it needs are checked before PTB is called."""

from __future__ import annotations

from typing import Any

import pytest

from bruce_bot.channels.telegram.app import start_updates
from bruce_bot.config import TelegramConfig


class FakeUpdater:
    running = False

    def __init__(self) -> None:
        self.webhook: dict[str, Any] | None = None

    async def start_webhook(self, **options: Any) -> None:
        self.webhook = options


class FakeApplication:
    def __init__(self) -> None:
        self.updater = FakeUpdater()


async def test_webhook_mode_without_a_url_says_what_to_set() -> None:
    app = FakeApplication()
    config = TelegramConfig(mode="webhook")
    with pytest.raises(RuntimeError, match=r"webhook\.url is empty"):
        await start_updates(app, config, lambda error: None)
    assert app.updater.webhook is None


async def test_webhook_listens_on_the_path_of_its_url() -> None:
    app = FakeApplication()
    webhook = {"url": "https://bot.example.com/bruce/hook", "secret_token": "s3cret"}
    config = TelegramConfig(mode="webhook", webhook=webhook)
    await start_updates(app, config, lambda error: None)
    assert app.updater.webhook is not None
    assert app.updater.webhook["url_path"] == "bruce/hook"
    assert app.updater.webhook["webhook_url"] == "https://bot.example.com/bruce/hook"
    assert app.updater.webhook["secret_token"] == "s3cret"
