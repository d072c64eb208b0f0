"""Where the LLM settings in use come from, for the failure replies to name the right fix.

A turn that fails on a refused key or an unknown model tells the chat what to check
(`agent/failures.py`). That depends on where the value in use comes from — saved in the
dashboard's Settings (fixed there, no restart) or config.yml — as its `Override` says
(settings/llm.py), and on whether a dashboard runs to point to. The sources are read when a turn
fails (the settings store caches them), and the dashboard's address is known once its server
listens (`app.public_url` when the config sets it, else the address it bound).
"""

from __future__ import annotations

from dataclasses import dataclass

from bruce_bot.settings.llm import FieldSource, LLMSettings


@dataclass(frozen=True, slots=True)
class FixHints:
    """Where the LLM settings a reply's fix names come from, and where the dashboard is."""

    api_key: FieldSource = "config"
    model: FieldSource = "config"
    dashboard_url: str | None = None  # e.g. http://127.0.0.1:8080; None: no dashboard runs


class SettingSources:
    def __init__(self, llm: LLMSettings | None, public_url: str | None = None) -> None:
        self._llm = llm  # None: the LLM is not the dashboard's to set (tests)
        self._public_url = public_url.rstrip("/") if public_url else None
        self._dashboard_url: str | None = None

    def dashboard_listening(self, url: str) -> None:
        """The dashboard serves at `url` (the configured public URL wins: it is the one
        reachable from the owner's browser)."""
        self._dashboard_url = self._public_url or url.rstrip("/")

    async def fix_hints(self) -> FixHints:
        sources = await self._llm.sources() if self._llm is not None else {}
        return FixHints(
            api_key=sources.get("api_key", "config"),
            model=sources.get("model", "config"),
            dashboard_url=self._dashboard_url,
        )
