"""`bruce doctor`: is everything Bruce needs in place? One check per dependency, each with a fix.

It loads and validates the configuration, then, at the same time and each under its own timeout
(nothing blocks for ever): the database (reachable, schema at the newest migration, SQLite's
`PRAGMA integrity_check` or a query on PostgreSQL), free disk space in `app.data_dir`, the LLM
(one call of one output token through the configured provider, with the server's own error when
it refuses), the clock (against the `Date` header of the LLM server's answer), Telegram `getMe`
and Discord's REST login when those channels are on (through their SDKs, in the channel modules),
the web port (free, or Bruce's own `/healthz` already answering there) and the transcription
endpoint when one is configured, and whether run_code's sandbox (bubblewrap, and slirp4netns
for its network) works here, with the fix when it does not. A check passes (ok), warns (Bruce
runs, but something deserves a look) or fails (Bruce will not work as configured); only
failures make the exit status 1. The report is printed with configured secrets as `***` (a
server's error may quote a token or key back), as text or, with `--json`, for machines.
`bruce db check` (rows Bruce cannot use) is `cli/db_check.py`, a different question.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import functools
import json
import shutil
import socket
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Literal

import httpx
import structlog
from sqlalchemy import pool, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from bruce_bot.channels.probe import ProbeError
from bruce_bot.config import ChannelsConfig, Config, ConfigError, load_config, resolve_path
from bruce_bot.llm.base import (
    LLMAuthenticationError,
    LLMError,
    LLMModelNotFoundError,
    LLMQuotaExceededError,
    LLMUnavailableError,
)
from bruce_bot.llm.probe import llm_failure, probe_llm
from bruce_bot.logs import configure_logging, scrubber
from bruce_bot.platforms import PlatformSection, PlatformSpec, get, names
from bruce_bot.sandbox.network import available as slirp_available
from bruce_bot.sandbox.probe import probe as probe_sandbox
from bruce_bot.settings.llm import FIELDS as LLM_FIELDS
from bruce_bot.settings.llm import setting_key as llm_setting
from bruce_bot.settings.tokens import login_parser, login_setting
from bruce_bot.storage.database import SCHEMA_HEAD
from bruce_bot.storage.settings import SettingsStore

log = structlog.get_logger(__name__)

Status = Literal["ok", "warn", "fail"]
MARKS: dict[Status, str] = {"ok": "✓", "warn": "!", "fail": "✗"}
CHECK_TIMEOUT_SECONDS = 15.0
MIN_FREE_BYTES = 512 * 1024 * 1024  # below this, media, artifacts and the database may not fit
MAX_CLOCK_SKEW_SECONDS = 30.0
DEFAULT_LLM_URLS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com/v1"}


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the report: what was checked, how it went, and what to do about it."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    def render(self) -> str:
        line = f"{MARKS[self.status]} {self.name}: {self.detail}"
        return f"{line}\n    fix: {self.fix}" if self.fix and self.status != "ok" else line


@dataclass(frozen=True, slots=True)
class Report:
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(check.status != "fail" for check in self.checks)

    def as_json(self) -> dict[str, object]:
        return {"ok": self.ok, "checks": [asdict(check) for check in self.checks]}


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        report = config_failure(exc)
    else:
        # Only errors: a refused probe is reported as a check, not as a log line too.
        configure_logging("error", config.logging.json_output, config.secrets())
        report = examine(config, resolve_path(args.config))
    if args.json:
        print(scrubber.scrub(json.dumps(report.as_json(), ensure_ascii=False, indent=2)))
    else:
        for check in report.checks:
            print(scrubber.scrub(check.render()))
        failed = sum(check.status == "fail" for check in report.checks)
        print("all checks passed" if report.ok else f"{failed} check(s) failed")
    return 0 if report.ok else 1


def config_failure(error: ConfigError) -> Report:
    """The report of a configuration that does not load: nothing else can be checked."""
    return Report([Check("config", "fail", "; ".join(error.problems), "fix the keys named")])


def examine(
    config: Config, source: Path | None, *, clock: Callable[[], float] = time.time
) -> Report:
    """The whole check-up of a loaded configuration (`source`: the file it came from)."""
    checks = [Check("config", "ok", f"valid ({source or 'built-in defaults'})")]
    # Each warning names its key and says what to do already.
    checks += [Check("config", "warn", warning) for warning in config.warnings()]
    return Report(checks + asyncio.run(_services(config, clock)))


async def _services(config: Config, clock: Callable[[], float]) -> list[Check]:
    config, saved = await with_saved_settings(config)
    checks = (
        [Check("settings", "ok", f"the dashboard's values are used for: {', '.join(saved)}")]
        if saved
        else []
    )
    return checks + await _probes(config, clock)


async def with_saved_settings(config: Config) -> tuple[Config, list[str]]:
    """`config` with what the dashboard saved in the database (LLM settings, platform tokens)
    over config.yml's, as the daemon runs with them, and the keys taken from there. A database
    that is missing or cannot be read changes nothing (its own check says why)."""
    url = make_url(config.database_url)
    if url.get_backend_name() == "sqlite" and (
        not url.database
        or url.database == ":memory:"
        or not await asyncio.to_thread(Path(url.database).exists)
    ):
        return config, []  # never create the file: nothing is saved in it yet
    engine = create_async_engine(config.database_url, poolclass=pool.NullPool)
    store = SettingsStore(engine)
    platforms = names()
    try:
        llm = {name: await store.get(llm_setting(name)) for name in LLM_FIELDS}
        tokens = {name: await store.get(login_setting(name)) for name in platforms}
    except Exception as exc:
        log.debug("doctor_settings_unreadable", error=repr(exc))
        return config, []
    finally:
        await engine.dispose()
    saved = [llm_setting(name) for name, value in llm.items() if value is not None]
    saved += [login_setting(name) for name, value in tokens.items() if value]
    try:
        merged_llm = config.llm.with_values({k: v for k, v in llm.items() if v is not None})
    except ValueError:
        merged_llm = config.llm  # the daemon ignores such values too (llm_settings_ignored)
    channels = config.channels
    for name, stored in tokens.items():
        if stored:
            channels = _with_saved_login(channels, name, stored)
    return config.model_copy(update={"llm": merged_llm, "channels": channels}), saved


def _with_saved_login(channels: ChannelsConfig, name: str, stored: Any) -> ChannelsConfig:
    """`channels` with the login saved for platform `name` (one token, or several fields); a
    stored login the daemon would ignore (it no longer passes) changes nothing here either."""
    try:
        login = login_parser(name)(stored)
        if get(name).single_token:
            return channels.with_token(name, login["token"])
        return channels.with_login(name, login)
    except ValueError:
        return channels


async def _probes(config: Config, clock: Callable[[], float]) -> list[Check]:
    probes: list[tuple[str, Callable[[], Awaitable[list[Check]]]]] = [
        ("database", lambda: _database(config)),
        ("disk", lambda: disk_check(config.app.data_dir)),
        ("llm", lambda: _llm(config, clock)),
    ]
    for spec, section in config.channels.enabled():
        probes.append((spec.name, functools.partial(_platform, spec, section)))
    if config.web.enabled:
        probes.append(("web", lambda: _web_port(config.web.host, config.web.port)))
    if config.transcription.is_configured:
        probes.append(("transcription", lambda: _transcription(config)))
    if config.tools.run_code.enabled is not False:
        probes.append(("sandbox", lambda: asyncio.to_thread(sandbox_checks, config)))
    results = await asyncio.gather(*(_bounded(name, probe) for name, probe in probes))
    return [check for checks in results for check in checks]


def sandbox_checks(config: Config) -> list[Check]:
    """Can run_code's sandbox start here (bubblewrap, user namespaces), and its network?"""
    settings = config.tools.run_code
    if settings.sandbox == "none":
        return [
            Check(
                "sandbox",
                "warn",
                "tools.run_code.sandbox is 'none': code runs unsandboxed, with Bruce's rights "
                "(every run asks first)",
                "install bubblewrap and remove sandbox: none",
            )
        ]
    found = probe_sandbox()
    if not found.works:
        # Not offered by default: a warning; asked for explicitly (enabled: true): a failure.
        status: Status = "fail" if settings.enabled else "warn"
        return [Check("sandbox", status, f"run_code is not offered: {found.detail}", found.fix)]
    checks = [Check("sandbox", "ok", found.detail)]
    if not slirp_available():
        checks.append(
            Check(
                "sandbox",
                "warn",
                "slirp4netns is not installed: run_code calls asking for the network are refused",
                "install slirp4netns (Debian/Ubuntu: sudo apt install slirp4netns)",
            )
        )
    return checks


async def _bounded(name: str, probe: Callable[[], Awaitable[list[Check]]]) -> list[Check]:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            return await probe()
    except TimeoutError:
        return [
            Check(
                name,
                "fail",
                f"no answer within {CHECK_TIMEOUT_SECONDS:g} s",
                "check the network and the address configured for it",
            )
        ]
    except Exception as exc:  # a check that breaks is a failed check, never a traceback
        return [Check(name, "fail", f"the check itself failed: {type(exc).__name__}: {exc}")]


# ---- database --------------------------------------------------------------------------------


async def _database(config: Config) -> list[Check]:
    url = make_url(config.database_url)
    where = config.database_url.split("@")[-1]
    if url.get_backend_name() == "sqlite":
        if not url.database or url.database == ":memory:":
            return [Check("database", "ok", "in memory (nothing kept after exit)")]
        return await asyncio.to_thread(_sqlite_file, Path(url.database))
    engine = create_async_engine(config.database_url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
            exists = (
                await connection.execute(text("SELECT to_regclass('alembic_version')"))
            ).scalar()
            revision = (
                (await connection.execute(text("SELECT version_num FROM alembic_version"))).scalar()
                if exists
                else None
            )
    except Exception as exc:
        return [
            Check(
                "database",
                "fail",
                f"cannot connect to {where}: {type(exc).__name__}: {exc}",
                "check database.url (host, port, user, password) and that PostgreSQL runs",
            )
        ]
    finally:
        await engine.dispose()
    return [Check("database", "ok", f"reachable: {where}"), revision_check(revision)]


def _sqlite_file(path: Path) -> list[Check]:
    if not path.exists():
        return [
            Check(
                "database",
                "warn",
                f"{path} does not exist yet",
                "start Bruce or run `bruce db upgrade`: either creates it",
            )
        ]
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            verdict = [row[0] for row in connection.execute("PRAGMA integrity_check")]
            has_versions = connection.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
            ).fetchone()
            revision = (
                connection.execute("SELECT version_num FROM alembic_version").fetchone()
                if has_versions
                else None
            )
        finally:
            connection.close()
    except sqlite3.Error as exc:
        return [
            Check(
                "database",
                "fail",
                f"{path} cannot be read: {exc}",
                "restore the file from a backup (or move it away to start afresh)",
            )
        ]
    if verdict != ["ok"]:
        return [
            Check(
                "database",
                "fail",
                f"{path} is damaged: {'; '.join(verdict[:3])}",
                "restore the file from a backup; `sqlite3 bruce.db .recover` may save the rest",
            )
        ]
    return [
        Check("database", "ok", f"{path} (integrity ok)"),
        revision_check(revision[0] if revision else None),
    ]


def revision_check(revision: str | None) -> Check:
    """The schema's alembic revision against the newest this Bruce knows (`SCHEMA_HEAD`)."""
    if revision == SCHEMA_HEAD:
        return Check("migrations", "ok", f"schema at the newest migration ({SCHEMA_HEAD})")
    if revision is None:
        return Check("migrations", "warn", "no schema yet", "start Bruce or run `bruce db upgrade`")
    if revision.isdigit() and SCHEMA_HEAD.isdigit() and int(revision) > int(SCHEMA_HEAD):
        return Check(
            "migrations",
            "fail",
            f"schema {revision} is newer than this Bruce knows ({SCHEMA_HEAD})",
            "run the newer Bruce that upgraded it, or restore a backup",
        )
    return Check(
        "migrations",
        "warn",
        f"schema at {revision}, the newest is {SCHEMA_HEAD}",
        "run `bruce db upgrade` (Bruce also upgrades it when it starts)",
    )


# ---- disk ------------------------------------------------------------------------------------


async def disk_check(data_dir: Path, minimum: int = MIN_FREE_BYTES) -> list[Check]:
    """Free space where `data_dir` is (or will be made); a warning below `minimum` bytes."""
    free = await asyncio.to_thread(_free_bytes, data_dir)
    detail = f"{_size(free)} free in {data_dir}"
    if free < minimum:
        return [
            Check(
                "disk",
                "warn",
                f"only {detail}",
                f"free space (at least {_size(minimum)}) or move app.data_dir",
            )
        ]
    return [Check("disk", "ok", detail)]


def _free_bytes(data_dir: Path) -> int:
    existing = data_dir.resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent  # not created yet: the disk it will be made on
    return shutil.disk_usage(existing).free


def _size(count: float) -> str:
    unit = "B"
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            break
        count /= 1024
    return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"


# ---- LLM and clock ---------------------------------------------------------------------------


async def _llm(config: Config, clock: Callable[[], float]) -> list[Check]:
    settings = config.llm
    name = f"{settings.provider} / {settings.model}"
    if not settings.is_configured:
        return [
            Check(
                "llm",
                "fail",
                f"{name}: no API key",
                "set llm.api_key (or llm.base_url of a local OpenAI-compatible server)",
            )
        ]
    try:
        await probe_llm(settings)
    except LLMError as exc:
        return [Check("llm", "fail", f"{name}: {llm_failure(exc)}", _llm_fix(exc))]
    return [Check("llm", "ok", f"{name} answers"), await _clock(config, clock)]


def _llm_fix(exc: LLMError) -> str:
    if isinstance(exc, LLMAuthenticationError):
        return "llm.api_key was refused: set it to a valid key of this provider"
    if isinstance(exc, LLMModelNotFoundError):
        return "set llm.model to a model this server offers"
    if isinstance(exc, LLMQuotaExceededError):
        return "add credit to the provider account (or change llm.provider)"
    if isinstance(exc, LLMUnavailableError):
        return "check the network and llm.base_url; retry later if the provider is overloaded"
    return "check llm.model, llm.base_url and llm.provider"


async def _clock(config: Config, clock: Callable[[], float]) -> Check:
    url = config.llm.base_url or DEFAULT_LLM_URLS[config.llm.provider]
    try:
        async with httpx.AsyncClient(timeout=5.0) as http:
            answer = await http.get(url)
    except httpx.HTTPError as exc:
        return Check("clock", "warn", f"could not ask {url} for the time: {exc}")
    return clock_check(answer.headers.get("date"), clock(), url)


def clock_check(date_header: str | None, now: float, source: str) -> Check:
    """Compare the local clock `now` (epoch seconds) with a server's `Date` header."""
    if not date_header:
        return Check("clock", "warn", f"{source} sent no Date header; clock not compared")
    try:
        theirs = parsedate_to_datetime(date_header).timestamp()
    except (TypeError, ValueError):
        return Check("clock", "warn", f"unreadable Date header {date_header!r} from {source}")
    skew = now - theirs
    if abs(skew) > MAX_CLOCK_SKEW_SECONDS:
        direction = "ahead of" if skew > 0 else "behind"
        return Check(
            "clock",
            "warn",
            f"this machine's clock is {abs(skew):.0f} s {direction} {source}",
            "turn on time synchronisation (NTP, e.g. `timedatectl set-ntp true`): reminders "
            "fire by this clock",
        )
    return Check("clock", "ok", f"within {MAX_CLOCK_SKEW_SECONDS:g} s of {source}")


# ---- channels --------------------------------------------------------------------------------


def _no_token(channel: str) -> list[Check]:
    """An enabled platform without a token in config.yml: the daemon waits for one saved in
    the dashboard (settings/tokens.py), which this check-up does not read."""
    return [
        Check(
            channel,
            "warn",
            "no token in config.yml: the channel waits for one saved in the dashboard",
            f"save the bot token in Settings (Chat platforms), or set channels.{channel}.token",
        )
    ]


async def _platform(spec: PlatformSpec, section: PlatformSection) -> list[Check]:
    """Who the platform's token logs in as (Telegram `getMe`, Discord's REST login, ...)."""
    if not section.token:
        return _no_token(spec.name)
    try:
        bot = await spec.identity(section, CHECK_TIMEOUT_SECONDS / 2)
    except ProbeError as exc:
        return [Check(spec.name, "fail", exc.detail, exc.fix)]
    return [Check(spec.name, "ok", f"logged in as {bot.name}")]


async def _web_port(host: str, port: int) -> list[Check]:
    if port == 0:
        return [Check("web", "ok", f"{host}: a free port is picked at start")]
    where = f"{host}:{port}"
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            return [Check("web", "fail", f"cannot listen on {where}: {exc.strerror}", _PORT_FIX)]
    else:
        return [Check("web", "ok", f"{where} is free")]
    if await _is_bruce(host, port):
        return [Check("web", "ok", f"{where}: Bruce is already running there (/healthz answers)")]
    return [Check("web", "fail", f"{where} is taken by another program", _PORT_FIX)]


_PORT_FIX = "stop the program using it, or set web.port to a free port"


async def _is_bruce(host: str, port: int) -> bool:
    shown = f"[{host}]" if ":" in host else host
    try:
        async with httpx.AsyncClient(timeout=3.0) as http:
            answer = await http.get(f"http://{shown}:{port}/healthz")
        if answer.status_code == 200:
            return bool(answer.json() == {"status": "ok"})
        # Bruce's own answer while it cannot store messages (a full disk): still Bruce.
        body = answer.json() if answer.status_code == 503 else None
        return isinstance(body, dict) and body.get("status") == "degraded"
    except (httpx.HTTPError, ValueError):
        return False


# ---- transcription ---------------------------------------------------------------------------


async def _transcription(config: Config) -> list[Check]:
    settings = config.transcription
    base = (settings.base_url or "https://api.openai.com/v1").rstrip("/")
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    try:
        async with httpx.AsyncClient(timeout=CHECK_TIMEOUT_SECONDS / 2) as http:
            answer = await http.get(f"{base}/models", headers=headers)
    except httpx.HTTPError as exc:
        return [
            Check(
                "transcription",
                "fail",
                f"{base} unreachable: {type(exc).__name__}: {exc}",
                "check transcription.base_url and that the server runs",
            )
        ]
    if answer.status_code in (401, 403):
        return [
            Check(
                "transcription",
                "fail",
                f"{base} refused the key ({answer.status_code})",
                "set transcription.api_key to a valid key",
            )
        ]
    return [Check("transcription", "ok", f"{base} answers")]
