"""Loading a configuration: read the YAML, replace `${VAR}` / `${VAR:-default}` from the
environment, validate with the schema, then the checks across sections (a dashboard reachable
beyond loopback needs a strong token; a search provider needs its key). Every problem is a
`ConfigError`, so a wrong config never ends in a traceback."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml
from pydantic import (
    ValidationError,
)

from bruce_bot.config.errors import ConfigError, describe, is_secret_key, mask_url_userinfo
from bruce_bot.config.schema import (
    DEFAULT_CONFIG_FILE,
    Config,
    WebSearchConfig,
    is_loopback_name,
    mcp_problems,
)
from bruce_bot.config.token_strength import TOKEN_HOW_TO, token_weakness

_ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_PLAIN_INT = re.compile(r"-?[1-9][0-9]*|0")


def interpolate(value: Any, env: dict[str, str], path: str, missing: list[str]) -> Any:
    """Replace ${VAR} and ${VAR:-default} in every string of a parsed YAML tree."""
    if isinstance(value, dict):
        return {
            k: interpolate(v, env, f"{path}.{k}" if path else str(k), missing)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [interpolate(v, env, f"{path}[{i}]", missing) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        missing.append(
            f"{path}: environment variable {name} is not set; export it, or write "
            f"${{{name}:-default}} to give a default"
        )
        return ""

    replaced = _ENV_PATTERN.sub(replace, value)
    # A whole-value substitution like `port: ${PORT}` should still become a number or bool. Only
    # plain forms are converted, so a secret like 0123 or 1_000 is never rewritten (YAML would read
    # them as octal / 1000); pydantic still turns such strings into numbers where a number is due.
    if replaced != value and _ENV_PATTERN.fullmatch(value):
        if replaced in {"true", "false"}:
            return replaced == "true"
        if _PLAIN_INT.fullmatch(replaced):
            return int(replaced)
    return replaced


def validate(raw: dict[str, Any], source: str = "configuration") -> Config:
    """Validate an already-interpolated mapping; raises `ConfigError` listing every problem."""
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError([describe(error) for error in exc.errors()], source) from None
    problems: list[str] = []
    web = config.web
    if web.enabled and not web.is_loopback:
        if not web.auth_token:
            problems.append(
                f"web.host: {web.host!r} is reachable beyond this machine but web.auth_token is "
                f"empty; {TOKEN_HOW_TO}, or bind web.host to 127.0.0.1"
            )
        elif web.login_disabled:
            problems.append(
                f"web.auth_token: 'none' (no login) is allowed only while web.host is loopback, "
                f"but web.host {web.host!r} is reachable beyond this machine; {TOKEN_HOW_TO}"
            )
        elif weakness := token_weakness(web.auth_token):
            problems.append(
                f"web.auth_token: too weak to guard web.host {web.host!r}, which is reachable "
                f"beyond this machine: {weakness}; {TOKEN_HOW_TO}"
            )
    elif web.enabled:
        problems += _exposed_without_login(config)
    # An enabled platform without a token is allowed: its channel waits for the token the
    # dashboard saves (Settings, settings/tokens.py), and start-up logs that it waits.
    problems += _web_search_problems(config.tools.web_search)
    problems += mcp_problems(config.mcp)
    problems += _webhook_problems(config)
    if problems:
        raise ConfigError(problems, source)
    return config


def _exposed_without_login(config: Config) -> list[str]:
    """A loopback dashboard reached under another name (a reverse proxy or tunnel forwarding
    app.public_url or a web.allowed_hosts name to it) is open to whoever reaches that name:
    it needs a strong web.auth_token of its own (a generated one is for this machine only)."""
    web = config.web
    exposed: list[tuple[str, str]] = []
    public_host = urlparse(config.app.public_url).hostname or ""
    if public_host and not is_loopback_name(public_host):
        exposed.append(("app.public_url", public_host))
    for index, entry in enumerate(web.allowed_hosts):
        host = (urlparse(entry).hostname if "://" in entry else entry.rsplit(":", 1)[0]) or ""
        if not is_loopback_name(host.strip("[]")):
            exposed.append((f"web.allowed_hosts[{index}]", host))
    if not exposed or (
        web.auth_token and not web.login_disabled and token_weakness(web.auth_token) is None
    ):
        return []
    why = (
        "is empty"
        if not web.auth_token
        else "is 'none' (no login)"
        if web.login_disabled
        else f"is too weak ({token_weakness(web.auth_token)})"
    )
    return [
        f"{key}: the dashboard is meant to answer under {host!r} (through a reverse proxy or "
        f"tunnel, anyone who reaches it) but web.auth_token {why}; {TOKEN_HOW_TO}"
        for key, host in exposed
    ]


def _webhook_problems(config: Config) -> list[str]:
    """Slack's Events API posts to Bruce's web server: it must run."""
    slack = config.channels.section("slack")
    if slack.enabled and getattr(slack, "mode", "") == "events" and not config.web.enabled:
        return [
            "channels.slack.mode: 'events' needs Bruce's web server (Slack posts to "
            "/slack/events): set web.enabled: true, or use mode: socket"
        ]
    return []


def _web_search_problems(search: WebSearchConfig) -> list[str]:
    """The chosen search provider's URL or key must be set (only when web search is enabled)."""
    if not search.enabled:
        return []
    prefix = "tools.web_search"
    if search.provider == "searxng" and not search.searxng_url:
        return [
            f"{prefix}.searxng_url: empty but {prefix}.provider is searxng; set it to your SearXNG "
            "instance (e.g. http://127.0.0.1:8888, with the JSON format enabled in its "
            "settings.yml), or use provider: duckduckgo"
        ]
    if search.provider == "brave" and not search.brave_api_key:
        return [
            f"{prefix}.brave_api_key: empty but {prefix}.provider is brave; set it (e.g. "
            "${BRAVE_API_KEY}) to a Brave Search API key, or use provider: duckduckgo"
        ]
    if search.provider == "tavily" and not search.tavily_api_key:
        return [
            f"{prefix}.tavily_api_key: empty but {prefix}.provider is tavily; set it (e.g. "
            "${TAVILY_API_KEY}) to a Tavily API key, or use provider: duckduckgo"
        ]
    return []


# A quoted fragment of a YAML problem: longer than a character or an escape ('\t'), it is the name
# of an alias, anchor or tag, which may be the start of a secret written without quotes (`*...`).
_YAML_QUOTED = re.compile(r"'(?!<)[^'\s]{3,}'")
_YAML_ANY_QUOTED = re.compile(r"'[^'\s]+'")
_YAML_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)\s*:")


def _yaml_problem(problem: str, line: str) -> str:
    """PyYAML's description of a syntax error on `line`, leaving out what could be a value: on
    the line of a secret-named key, even a single character."""
    secret_line = any(is_secret_key(name) for name in _YAML_KEY.findall(line))
    pattern = _YAML_ANY_QUOTED if secret_line else _YAML_QUOTED
    return mask_url_userinfo(pattern.sub("(hidden)", problem))


def resolve_path(explicit: str | os.PathLike[str] | None) -> Path | None:
    """`--config PATH`, else $BRUCE_CONFIG, else ./config.yml when present, else None (defaults)."""
    if explicit:
        return Path(explicit)
    if os.environ.get("BRUCE_CONFIG"):
        return Path(os.environ["BRUCE_CONFIG"])
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.exists() else None


def load_config(
    path: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None
) -> Config:
    """Read, interpolate and validate the configuration; built-in defaults when there is no file."""
    env = dict(os.environ) if env is None else env
    resolved = resolve_path(path)
    if resolved is None:
        return validate({}, "built-in defaults")
    source = str(resolved)
    try:
        text = resolved.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            [f"{resolved}: file not found; copy config.example.yml to start"], source
        ) from None
    except OSError as exc:
        raise ConfigError([f"{resolved}: cannot be read ({exc.strerror})"], source) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        lines = text.splitlines()
        line = lines[mark.line] if mark and mark.line < len(lines) else ""
        problem = _yaml_problem(getattr(exc, "problem", None) or str(exc), line)
        raise ConfigError([f"YAML syntax error at {where}: {problem}"], source) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(["the top level must be a mapping of sections (app:, llm:, ...)"], source)
    missing: list[str] = []
    interpolated = interpolate(raw, env, "", missing)
    if missing:
        raise ConfigError(missing, source)
    return validate(interpolated, source)
