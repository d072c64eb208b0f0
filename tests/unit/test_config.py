"""What a user sees when Bruce reads its config: the example file, interpolation, errors."""

from __future__ import annotations

import re
import secrets
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from bruce_bot.config import (
    Config,
    ConfigError,
    LLMConfig,
    Secret,
    WebFetchConfig,
    interpolate,
    is_secret_key,
    load_config,
    token_weakness,
    validate,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "config.example.yml"
STRONG_TOKEN = "q8Zr3xT-vN0bW5kLmY2cJ7hFs9dPa4eG6uR1tKoX"  # as `bruce token` makes them


def write_config(directory: Path, text: str, name: str = "config.yml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def load_text(directory: Path, text: str, env: dict[str, str] | None = None) -> Config:
    return load_config(write_config(directory, text), env={} if env is None else env)


def error_of(directory: Path, text: str, env: dict[str, str] | None = None) -> str:
    """The problems reported for `text`, without the file name (tmp paths carry test names)."""
    with pytest.raises(ConfigError) as caught:
        load_text(directory, text, env)
    return "\n".join(caught.value.problems)


def undocumented_keys(model: type[BaseModel], documented: Any, prefix: str = "") -> list[str]:
    """Dotted keys of `model` (by their YAML name) that the parsed YAML mapping leaves out."""
    missing: list[str] = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        dotted = f"{prefix}{key}"
        if not isinstance(documented, dict) or key not in documented:
            missing.append(dotted)
            continue
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            missing += undocumented_keys(annotation, documented[key], f"{dotted}.")
    return missing


# ---------------------------------------------------------------------------------------------
# config.example.yml


def test_example_config_loads_without_any_environment_variables() -> None:
    config = load_config(EXAMPLE, env={})

    assert config.app.timezone == "America/Sao_Paulo"
    assert config.database_url == "sqlite+aiosqlite:///./data/bruce.db"
    assert config.llm.api_key == ""
    assert config.channels.telegram.token == ""
    assert config.web.auth_token == ""


def test_example_config_documents_every_key_of_the_model() -> None:
    documented = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))

    assert set(documented) == set(Config.model_fields)
    assert undocumented_keys(Config, documented) == []


def test_undocumented_key_check_notices_a_missing_nested_key() -> None:
    documented = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    del documented["channels"]["telegram"]["webhook"]["secret_token"]
    del documented["logging"]["json"]

    assert undocumented_keys(Config, documented) == [
        "channels.telegram.webhook.secret_token",
        "logging.json",
    ]


def test_every_key_in_the_example_has_a_comment_above_it() -> None:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    uncommented = []
    for number, line in enumerate(lines):
        match = re.match(r"^( *)([a-z_]+):(.*)$", line)
        if not match or not match.group(1):  # top-level sections are self-explanatory
            continue
        following = next(
            (rest for rest in lines[number + 1 :] if rest.strip() and rest.lstrip()[0] != "#"), ""
        )
        indent = len(following) - len(following.lstrip())
        is_section = not match.group(3).strip() and indent > len(match.group(1))
        if not is_section and not lines[number - 1].lstrip().startswith("#"):
            uncommented.append(line.strip())
    assert uncommented == []


def test_example_values_are_the_defaults_except_where_it_says_otherwise() -> None:
    example = load_config(EXAMPLE, env={}).model_dump()
    defaults = Config().model_dump()

    example["app"].pop("timezone")
    defaults["app"].pop("timezone")
    assert example["database"].pop("url") == "sqlite+aiosqlite:///./data/bruce.db"
    assert defaults["database"].pop("url") == ""
    assert example["llm"].pop("background_model") == "claude-haiku-4-5"
    assert defaults["llm"].pop("background_model") == ""
    assert example == defaults


def test_example_shows_postgres_and_ollama_and_reads_secrets_from_the_environment() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")

    assert "postgresql+asyncpg://" in text
    assert "# provider: openai" in text
    assert "# base_url: http://127.0.0.1:11434/v1" in text
    assert "# model: llama3.1" in text
    for variable in (
        "ANTHROPIC_API_KEY",
        "TELEGRAM_BOT_TOKEN",
        "DISCORD_BOT_TOKEN",
        "BRUCE_WEB_TOKEN",
    ):
        assert f"${{{variable}:-}}" in text


def test_example_secrets_come_from_the_environment_when_set() -> None:
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "TELEGRAM_BOT_TOKEN": "123456:ABCdef",
        "DISCORD_BOT_TOKEN": "discord-token",
        "BRUCE_WEB_TOKEN": "web-token",
    }

    config = load_config(EXAMPLE, env=env)

    assert config.llm.api_key == "sk-ant-test"
    assert config.channels.telegram.token == "123456:ABCdef"
    assert config.channels.discord.token == "discord-token"
    assert config.web.auth_token == "web-token"


# ---------------------------------------------------------------------------------------------
# ${VAR} interpolation


def test_env_variables_are_substituted_and_defaults_used_when_unset(tmp_path: Path) -> None:
    text = (
        "app:\n  name: ${BOT_NAME}\n"
        "llm:\n  model: ${MODEL:-llama3.1}\n  api_key: sk-${KEY_PART}-end\n"
        "  base_url: ${LLM_URL:-}\n"
    )

    config = load_text(tmp_path, text, {"BOT_NAME": "Alfred", "KEY_PART": "abc"})

    assert config.app.name == "Alfred"
    assert config.llm.model == "llama3.1"
    assert config.llm.api_key == "sk-abc-end"
    assert config.llm.base_url is None


def test_set_env_variable_wins_over_its_default(tmp_path: Path) -> None:
    config = load_text(tmp_path, "llm:\n  model: ${MODEL:-llama3.1}\n", {"MODEL": "qwen2.5"})

    assert config.llm.model == "qwen2.5"


def test_whole_value_env_variable_becomes_a_number_or_boolean(tmp_path: Path) -> None:
    text = "web:\n  port: ${PORT}\n  enabled: ${WEB_ENABLED}\n"

    config = load_text(tmp_path, text, {"PORT": "9090", "WEB_ENABLED": "false"})

    assert config.web.port == 9090
    assert config.web.enabled is False
    assert interpolate({"port": "${PORT}"}, {"PORT": "9090"}, "", []) == {"port": 9090}


@pytest.mark.parametrize("secret", ["123456", "0123456", "1_000", "0x1F", "1.50"])
def test_secret_from_environment_that_looks_like_a_number_is_kept_exactly(
    tmp_path: Path, secret: str
) -> None:
    config = load_text(
        tmp_path, "web:\n  auth_token: ${BRUCE_WEB_TOKEN}\n", {"BRUCE_WEB_TOKEN": secret}
    )

    assert config.web.auth_token == secret


def test_missing_env_variable_without_default_names_the_key_and_the_variable(
    tmp_path: Path,
) -> None:
    message = error_of(tmp_path, "llm:\n  api_key: ${ANTHROPIC_API_KEY}\n", env={})

    assert "llm.api_key" in message
    assert "ANTHROPIC_API_KEY is not set" in message
    assert "${ANTHROPIC_API_KEY:-default}" in message


def test_missing_env_variable_in_a_list_names_the_list_item(tmp_path: Path) -> None:
    message = error_of(tmp_path, "skills:\n  dirs: [./skills, '${SKILLS_DIR}']\n", env={})

    assert "skills.dirs[1]" in message
    assert "SKILLS_DIR" in message


# ---------------------------------------------------------------------------------------------
# Validation errors name the key, the value and the fix


def test_misspelled_key_is_named_with_a_suggestion(tmp_path: Path) -> None:
    message = error_of(tmp_path, "llm:\n  provder: openai\n")

    assert "llm.provder" in message
    assert "did you mean 'provider'" in message


def test_misspelled_section_is_named_with_a_suggestion(tmp_path: Path) -> None:
    message = error_of(tmp_path, "channels:\n  telegarm:\n    enabled: true\n")

    assert "channels.telegarm" in message
    assert "did you mean 'telegram'" in message


def test_logging_json_is_the_yaml_key_and_misspelling_suggests_it(tmp_path: Path) -> None:
    assert load_text(tmp_path, "logging:\n  json: true\n").logging.json_output is True

    message = error_of(tmp_path, "logging:\n  jsn: true\n")

    assert "logging.jsn" in message
    assert "did you mean 'json'" in message


def test_wrong_type_names_the_key_and_the_value(tmp_path: Path) -> None:
    message = error_of(tmp_path, "llm:\n  max_tokens: abc\n")

    assert "llm.max_tokens" in message
    assert "'abc'" in message


def test_value_outside_the_allowed_choices_lists_them(tmp_path: Path) -> None:
    message = error_of(tmp_path, "llm:\n  provider: gemini\n")

    assert "llm.provider" in message
    assert "'gemini'" in message
    assert "'anthropic'" in message
    assert "'openai'" in message


def test_section_written_as_a_plain_value_is_named(tmp_path: Path) -> None:
    message = error_of(tmp_path, "llm: claude-sonnet-4-5\n")

    assert "llm: 'claude-sonnet-4-5'" in message
    assert "expected a section" in message


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_text(
            tmp_path, "llm:\n  provder: openai\n  max_tokens: abc\napp:\n  timezone: Nowhere\n"
        )

    assert len(caught.value.problems) == 3
    assert str(tmp_path / "config.yml") in str(caught.value)


def test_unknown_timezone_is_named_and_iana_names_are_suggested(tmp_path: Path) -> None:
    message = error_of(tmp_path, "app:\n  timezone: Mars/Olympus\n")

    assert "app.timezone" in message
    assert "Mars/Olympus" in message
    assert "IANA" in message
    assert "America/Sao_Paulo" in message


@pytest.mark.parametrize(
    ("yaml_text", "key", "expected"),
    [
        ("app:\n  public_url: localhost:8080\n", "app.public_url", "http://"),
        ("llm:\n  base_url: 127.0.0.1:11434/v1\n", "llm.base_url", "http://"),
        (
            "channels:\n  discord:\n    gateway_url: http://127.0.0.1:8082/gateway\n",
            "channels.discord.gateway_url",
            "ws:// or wss://",
        ),
        (
            "channels:\n  telegram:\n    webhook:\n      url: bot.example.com/hook\n",
            "channels.telegram.webhook.url",
            "https://",
        ),
    ],
)
def test_malformed_url_is_named_with_the_expected_scheme(
    tmp_path: Path, yaml_text: str, key: str, expected: str
) -> None:
    message = error_of(tmp_path, yaml_text)

    assert key in message
    assert expected in message


def test_well_formed_urls_are_accepted_without_trailing_slash(tmp_path: Path) -> None:
    text = (
        "llm:\n  provider: openai\n  base_url: http://127.0.0.1:11434/v1/\n"
        "channels:\n  discord:\n    gateway_url: wss://127.0.0.1:8082/gateway\n"
    )

    config = load_text(tmp_path, text)

    assert config.llm.base_url == "http://127.0.0.1:11434/v1"
    assert config.channels.discord.gateway_url == "wss://127.0.0.1:8082/gateway"


def test_database_url_with_an_unknown_driver_names_both_forms(tmp_path: Path) -> None:
    message = error_of(tmp_path, "database:\n  url: postgresql://bruce@db/bruce\n")

    assert "database.url" in message
    assert "postgresql+asyncpg://" in message
    assert "sqlite+aiosqlite:///" in message


def test_web_open_to_the_network_without_token_asks_for_web_auth_token(tmp_path: Path) -> None:
    message = error_of(tmp_path, "web:\n  host: 0.0.0.0\n")

    assert "web.auth_token" in message
    assert "0.0.0.0" in message


def test_web_open_to_the_network_with_token_is_accepted(tmp_path: Path) -> None:
    config = load_text(tmp_path, "web:\n  host: 0.0.0.0\n  auth_token: ${T}\n", {"T": STRONG_TOKEN})

    assert config.web.host == "0.0.0.0"
    assert not config.web.is_loopback


@pytest.mark.parametrize("platform", ["telegram", "discord"])
def test_an_enabled_platform_without_a_token_is_valid_and_waits_for_one(
    tmp_path: Path, platform: str
) -> None:
    # The first-run path: turn the platform on in config.yml, paste the token in Settings.
    # Start-up logs `channel_waiting_for_token` and `bruce doctor` warns (their own tests).
    config = load_text(tmp_path, f"channels:\n  {platform}:\n    enabled: true\n")

    assert getattr(config.channels, platform).enabled
    assert getattr(config.channels, platform).token == ""


def test_key_left_empty_means_its_default(tmp_path: Path) -> None:
    text = (
        "llm:\n  api_key:\n  max_tokens:\n"
        "channels:\n  telegram:\n    webhook:\n      secret_token:\n    allowed_user_ids:\n"
        "skills:\n"
    )

    config = load_text(tmp_path, text)

    assert config.llm.api_key == ""
    assert config.llm.max_tokens == 4096
    assert config.channels.telegram.webhook.secret_token == ""
    assert config.channels.telegram.allowed_user_ids == []
    assert config.skills.dirs == []


# ---------------------------------------------------------------------------------------------
# Reading the file


def test_yaml_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    message = error_of(tmp_path, "app:\n  name: Bruce\n   timezone: UTC\n")

    assert "line 3, column 12" in message


def test_top_level_list_is_an_error(tmp_path: Path) -> None:
    message = error_of(tmp_path, "- app\n- llm\n")

    assert "top level must be a mapping" in message


def test_config_file_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yml"

    with pytest.raises(ConfigError) as caught:
        load_config(missing, env={})

    assert str(missing) in str(caught.value)
    assert "not found" in str(caught.value)


def test_empty_file_gives_the_defaults(tmp_path: Path) -> None:
    assert load_text(tmp_path, "# nothing yet\n") == Config()


def test_without_any_file_the_built_in_defaults_are_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BRUCE_CONFIG", raising=False)

    config = load_config(None, env={})

    assert config == Config()
    assert config.database_url.startswith("sqlite+aiosqlite:///")
    assert Path(config.database_url.removeprefix("sqlite+aiosqlite:///")) == Path("data/bruce.db")


def test_config_yml_in_the_working_directory_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BRUCE_CONFIG", raising=False)
    write_config(tmp_path, "app:\n  name: FromCwd\n")

    assert load_config(None, env={}).app.name == "FromCwd"


def test_bruce_config_variable_wins_over_config_yml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write_config(tmp_path, "app:\n  name: FromCwd\n")
    chosen = write_config(tmp_path, "app:\n  name: FromVariable\n", name="chosen.yml")
    monkeypatch.setenv("BRUCE_CONFIG", str(chosen))

    assert load_config(None, env={}).app.name == "FromVariable"


def test_explicit_path_wins_over_bruce_config_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BRUCE_CONFIG", str(write_config(tmp_path, "app:\n  name: FromVariable\n")))
    explicit = write_config(tmp_path, "app:\n  name: Explicit\n", name="explicit.yml")

    assert load_config(explicit, env={}).app.name == "Explicit"


def test_bruce_config_pointing_nowhere_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BRUCE_CONFIG", str(tmp_path / "gone.yml"))

    with pytest.raises(ConfigError, match=r"gone\.yml"):
        load_config(None, env={})


# ---------------------------------------------------------------------------------------------
# Warnings, secrets, LLM readiness


def test_warning_for_missing_api_key_names_the_env_variable() -> None:
    (warning,) = Config().warnings()

    assert "llm.api_key" in warning
    assert "ANTHROPIC_API_KEY" in warning


def test_warning_for_missing_openai_key_names_openai_variable() -> None:
    (warning,) = Config.model_validate({"llm": {"provider": "openai"}}).warnings()

    assert "OPENAI_API_KEY" in warning


def test_warning_for_enabled_channel_with_empty_allowlist() -> None:
    config = Config.model_validate(
        {
            "llm": {"api_key": "sk-test"},
            "channels": {
                "telegram": {"enabled": True, "token": "123:abc", "pairing": False},
                "discord": {"enabled": True, "token": "dc-token", "allowed_user_ids": [42]},
            },
        }
    )

    (warning,) = config.warnings()

    assert "channels.telegram.allowed_user_ids" in warning
    assert "channels.telegram.pairing" in warning


def test_with_pairing_an_empty_allowlist_is_no_warning() -> None:
    config = Config.model_validate(
        {
            "llm": {"api_key": "sk-test"},
            "channels": {"telegram": {"enabled": True, "token": "123:abc"}},
        }
    )

    assert config.channels.telegram.pairing is True
    assert config.warnings() == []


def test_pairing_must_be_true_or_false(tmp_path: Path) -> None:
    message = error_of(tmp_path, "channels:\n  discord:\n    pairing: sometimes\n")
    assert "channels.discord.pairing" in message


def test_complete_config_has_no_warnings() -> None:
    config = Config.model_validate(
        {
            "llm": {"api_key": "sk-test"},
            "channels": {
                "telegram": {"enabled": True, "token": "123:abc", "allowed_user_ids": [7]}
            },
        }
    )

    assert config.warnings() == []


def test_secrets_lists_keys_and_tokens_but_no_empty_values() -> None:
    config = Config.model_validate(
        {
            "llm": {"api_key": "sk-ant-secret"},
            "channels": {
                "telegram": {"token": "123456:tg-secret"},
                "discord": {"token": "dc-secret"},
            },
            "web": {"auth_token": "web-secret"},
            "database": {"url": "postgresql+asyncpg://bruce:db-secret@db/bruce"},
        }
    )

    secrets = config.secrets()

    assert {"sk-ant-secret", "123456:tg-secret", "dc-secret", "web-secret", "db-secret"} <= set(
        secrets
    )
    assert "" not in secrets
    assert Config().secrets() == []


def _fields(model: type[BaseModel], path: str = "") -> list[tuple[str, Any]]:
    """Every field of the schema, sections inside sections (and dicts of them) included."""
    found = []
    for name, field in model.model_fields.items():
        found.append((f"{path}{name}", field))
        for inner in (field.annotation, *typing.get_args(field.annotation)):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                found += _fields(inner, f"{path}{name}.")
    return found


def test_every_field_named_like_a_secret_is_marked_secret_and_scrubbed() -> None:
    fields = _fields(Config)
    named = [path for path, _ in fields if is_secret_key(path.rsplit(".", 1)[-1])]
    assert len(named) >= 8  # precondition: the walk reaches the nested sections
    unmarked = [
        path
        for path, field in fields
        if is_secret_key(path.rsplit(".", 1)[-1])
        and not any(isinstance(item, Secret) for item in field.metadata)
    ]
    assert not unmarked, f"mark these SecretText in bruce_bot/config.py: {unmarked}"
    # And what is marked is what the scrubber gets: a value under each marked text field.
    texts = [
        path
        for path, field in fields
        if any(isinstance(item, Secret) for item in field.metadata) and "mcp." not in path
    ]
    values: dict[str, Any] = {}
    for index, path in enumerate(texts):
        *sections, key = path.split(".")
        node = values
        for section in sections:
            node = node.setdefault(section, {})
        node[key] = f"marked-value-{index:03d}"
    secrets_found = set(Config.model_validate(values).secrets())
    assert {f"marked-value-{index:03d}" for index in range(len(texts))} <= secrets_found


def test_openai_compatible_server_without_key_counts_as_configured() -> None:
    ollama = LLMConfig(provider="openai", model="llama3.1", base_url="http://127.0.0.1:11434/v1")

    assert ollama.is_configured
    assert not LLMConfig(provider="anthropic", base_url="http://127.0.0.1:9000").is_configured
    assert not LLMConfig(provider="openai").is_configured
    assert LLMConfig(api_key="sk-test").is_configured


def test_background_model_defaults_to_the_main_model() -> None:
    assert LLMConfig(model="llama3.1").effective_background_model == "llama3.1"
    assert LLMConfig(background_model="small").effective_background_model == "small"


# ---------------------------------------------------------------------------------------------
# tools.web_search: the chosen provider's URL or key


@pytest.mark.parametrize(
    ("provider", "key", "hint"),
    [
        ("searxng", "tools.web_search.searxng_url", "http://127.0.0.1:8888"),
        ("brave", "tools.web_search.brave_api_key", "${BRAVE_API_KEY}"),
        ("tavily", "tools.web_search.tavily_api_key", "${TAVILY_API_KEY}"),
    ],
)
def test_search_provider_without_its_url_or_key_names_the_key_and_the_fix(
    tmp_path: Path, provider: str, key: str, hint: str
) -> None:
    message = error_of(tmp_path, f"tools:\n  web_search:\n    provider: {provider}\n")

    assert message.startswith(f"{key}: empty but tools.web_search.provider is {provider}")
    assert hint in message
    assert "provider: duckduckgo" in message


@pytest.mark.parametrize(
    ("provider", "setting"),
    [
        ("searxng", "searxng_url: http://127.0.0.1:8888/"),
        ("brave", "brave_api_key: ${BRAVE_API_KEY}"),
        ("tavily", "tavily_api_key: ${TAVILY_API_KEY}"),
    ],
)
def test_search_provider_with_its_url_or_key_is_accepted(
    tmp_path: Path, provider: str, setting: str
) -> None:
    text = f"tools:\n  web_search:\n    provider: {provider}\n    {setting}\n"
    env = {"BRAVE_API_KEY": "brave-secret", "TAVILY_API_KEY": "tvly-secret"}

    config = load_text(tmp_path, text, env)

    assert config.tools.web_search.provider == provider


def test_disabled_web_search_needs_no_provider_key(tmp_path: Path) -> None:
    config = load_text(tmp_path, "tools:\n  web_search:\n    enabled: false\n    provider: brave\n")

    assert not config.tools.web_search.enabled


def test_duckduckgo_search_needs_no_key(tmp_path: Path) -> None:
    config = load_text(tmp_path, "tools:\n  web_search:\n    provider: duckduckgo\n")

    assert config.tools.web_search.provider == "duckduckgo"


def test_search_provider_problem_is_reported_with_the_other_problems(tmp_path: Path) -> None:
    text = "web:\n  host: 0.0.0.0\ntools:\n  web_search:\n    provider: tavily\n"

    message = error_of(tmp_path, text)

    assert "web.auth_token is empty" in message
    assert "tools.web_search.tavily_api_key" in message


# ---------------------------------------------------------------------------------------------
# web.auth_token strength


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("dashboard-token-4f9c2e", "22 characters long; at least 32"),
        ("password" * 4, "only 7 different characters"),
        ("a" * 48, "only 1 different character;"),
        ("12345678901234567890123456789012", "looks guessable"),
        ("abcdefghijklmnopqrstuvwxyz0123456789", "looks guessable"),
        ("admin-password-secret-token-bruce-letmein", "looks guessable"),
        ("Xk9#mQ2$vL" * 4, "looks guessable"),
        ("qwertyuiop-asdfghjkl-zxcvbnm-1234567890", "looks guessable"),
    ],
    ids=[
        "short",
        "word-repeated",
        "one-character",
        "digits",
        "sequences",
        "words",
        "block",
        "keys",
    ],
)
def test_a_weak_token_on_a_public_host_stops_loading_naming_the_key_the_reason_and_the_fix(
    tmp_path: Path, token: str, reason: str
) -> None:
    message = error_of(
        tmp_path,
        "web:\n  host: 0.0.0.0\n  auth_token: ${BRUCE_WEB_TOKEN}\n",
        {"BRUCE_WEB_TOKEN": token},
    )

    assert message.startswith("web.auth_token: too weak to guard web.host '0.0.0.0'")
    assert reason in message
    assert "bruce token" in message
    assert token not in message


def test_tokens_made_like_bruce_token_always_pass_and_so_do_long_hex_ones() -> None:
    made = [secrets.token_urlsafe(32) for _ in range(500)]
    hex_tokens = [secrets.token_hex(32) for _ in range(100)]

    assert [t for t in made + hex_tokens if token_weakness(t) is not None] == []


def test_a_weak_token_on_loopback_is_accepted_with_a_warning_naming_the_key() -> None:
    config = validate({"web": {"host": "127.0.0.1", "auth_token": "hunter2"}})

    [warning] = [w for w in config.warnings() if "web.auth_token" in w]
    assert "7 characters long" in warning and "bruce token" in warning
    assert "hunter2" not in warning


def test_a_strong_token_and_an_empty_one_on_loopback_give_no_token_warning() -> None:
    for token in (STRONG_TOKEN, ""):
        config = validate({"llm": {"api_key": "k"}, "web": {"auth_token": token}})
        assert config.warnings() == []


def test_a_weak_token_is_fine_when_the_web_app_is_off() -> None:
    config = validate({"web": {"enabled": False, "host": "0.0.0.0", "auth_token": "short"}})

    assert config.web.auth_token == "short"


# ---------------------------------------------------------------------------------------------
# secrets never appear in errors

SECRET = "sk-live-DoNotShow-7Qx2"


@pytest.mark.parametrize(
    "key",
    [
        "llm.api_key",
        "channels.telegram.token",
        "channels.telegram.webhook.secret_token",
        "channels.discord.token",
        "web.auth_token",
        "tools.web_search.brave_api_key",
        "tools.web_search.tavily_api_key",
    ],
)
@pytest.mark.parametrize("shape", ["list", "mapping"])
def test_a_secret_key_with_a_bad_value_is_named_without_its_value(
    tmp_path: Path, key: str, shape: str
) -> None:
    *sections, name = key.split(".")
    bad = f"[{SECRET}, x]" if shape == "list" else f"{{{SECRET}: x}}"
    text = "".join(f"{'  ' * depth}{part}:\n" for depth, part in enumerate(sections))
    text += f"{'  ' * len(sections)}{name}: {bad}\n"

    message = error_of(tmp_path, text)

    assert message.startswith(f"{key}: ")
    assert "wrong type" in message
    assert SECRET not in message


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("database:\n  url: postgresql://bruce:{secret}@db/bruce\n", "database.url"),
        ("llm:\n  base_url: ftp://bruce:{secret}@llm.example/v1\n", "llm.base_url"),
        (
            "tools:\n  web_search:\n    searxng_url: //bruce:{secret}@search.example\n",
            "tools.web_search.searxng_url",
        ),
        ("database:\n  url: [postgresql://bruce:{secret}@db/bruce]\n", "database.url"),
    ],
    ids=["database-driver", "llm-scheme", "searxng-scheme", "database-type"],
)
def test_a_malformed_url_with_a_password_is_named_with_the_password_masked(
    tmp_path: Path, yaml_text: str, key: str
) -> None:
    message = error_of(tmp_path, yaml_text.format(secret=SECRET))

    assert message.startswith(f"{key}: ")
    assert SECRET not in message
    if "postgresql" in yaml_text:
        assert "postgresql://bruce:***@db/bruce" in message


def test_a_check_across_a_section_names_the_keys_without_showing_the_section(
    tmp_path: Path,
) -> None:
    text = (
        f"llm:\n  api_key: {SECRET}\n  max_tokens: 2000\n  thinking:\n    enabled: true\n"
        f"channels:\n  telegram:\n    enabled: true\n    token: {SECRET}\n    mode: push\n"
    )

    message = error_of(tmp_path, text)

    assert "llm.max_tokens (2000) must be larger than llm.thinking.budget_tokens" in message
    assert "channels.telegram.mode: 'push' is not allowed" in message
    assert SECRET not in message


@pytest.mark.parametrize(
    "line",
    [f"  api_key: *{SECRET}", f"  api_key: !{SECRET} x", '  api_key: "sk\\qsecret"'],
    ids=["alias", "tag", "escape"],
)
def test_a_yaml_error_in_a_secret_value_gives_line_and_column_but_not_the_value(
    tmp_path: Path, line: str
) -> None:
    message = error_of(tmp_path, f"llm:\n{line}\n")

    assert message.startswith("YAML syntax error at line 2, column ")
    assert SECRET not in message
    assert "'q'" not in message  # not even one character of it


def test_a_yaml_error_elsewhere_still_shows_the_character_at_fault(tmp_path: Path) -> None:
    message = error_of(tmp_path, 'app:\n  name: "Bru\\qce"\n')

    assert "found unknown escape character 'q'" in message


def test_secrets_are_also_known_to_the_log_scrubber_by_value() -> None:
    config = validate({"database": {"url": f"postgresql+asyncpg://bruce:{SECRET}@db/bruce"}})

    assert SECRET in config.secrets()


# ---------------------------------------------------------------------------------------------
# tools.web_fetch domain lists


def test_domain_list_entries_are_normalised_to_lower_case_idna_without_trailing_dot() -> None:
    config = WebFetchConfig(
        blocked_domains=[" Example.COM. ", "bücher.example", "xn--bcher-kva.example"],
        allowed_domains=["News.Example"],
    )

    assert config.blocked_domains == [
        "example.com",
        "xn--bcher-kva.example",
        "xn--bcher-kva.example",
    ]
    assert config.allowed_domains == ["news.example"]


@pytest.mark.parametrize(
    "entry",
    [
        "https://example.com",
        "example.com/path",
        "example.com:8080",
        "user@example.com",
        "*.example.com",
        "exa mple.com",
        "a..b",
        "-bad-.example",
        "",
    ],
)
def test_a_domain_list_entry_that_is_not_a_bare_domain_is_named_with_its_index(
    tmp_path: Path, entry: str
) -> None:
    text = f'tools:\n  web_fetch:\n    allowed_domains: [ok.example, "{entry}"]\n'

    message = error_of(tmp_path, text)

    assert message.startswith(f"tools.web_fetch.allowed_domains[1]: {entry!r} is not a ")
    assert "bare domain like example.com" in message


def test_media_settings_are_checked_with_errors_that_name_the_key(tmp_path: Path) -> None:
    problems = error_of(
        tmp_path,
        "llm: {vision: maybe}\n"
        "transcription: {language: English, base_url: 'ftp://x'}\n"
        "documents: {max_chars: 10}\n",
    )
    assert "llm.vision" in problems and "'auto', 'on' or 'off'" in problems
    assert "transcription.language" in problems and "ISO-639-1" in problems
    assert "transcription.base_url" in problems
    assert "documents.max_chars" in problems


def test_text_tool_calls_defaults_to_auto_and_a_bad_value_names_the_key(tmp_path: Path) -> None:
    assert load_text(tmp_path, "{}").llm.text_tool_calls == "auto"
    assert load_text(tmp_path, "llm: {text_tool_calls: 'off'}").llm.text_tool_calls == "off"
    # Unquoted, YAML reads on/off as booleans: still the words they are.
    assert load_text(tmp_path, "llm: {text_tool_calls: off}").llm.text_tool_calls == "off"
    assert load_text(tmp_path, "llm: {text_tool_calls: on}").llm.text_tool_calls == "on"

    # The dashboard's LLM settings change other keys: this one stays as config.yml says.
    off = load_text(tmp_path, "llm: {text_tool_calls: 'off'}").llm
    assert off.with_values({"model": "qwen3:8b", "base_url": ""}).text_tool_calls == "off"

    problems = error_of(tmp_path, "llm: {text_tool_calls: sometimes}\n")

    assert "llm.text_tool_calls" in problems and "'auto', 'on' or 'off'" in problems


def test_transcription_is_off_until_an_endpoint_or_key_is_set(tmp_path: Path) -> None:
    assert not load_text(tmp_path, "{}").transcription.is_configured
    config = load_text(
        tmp_path, "transcription: {base_url: 'http://127.0.0.1:8000/v1', language: PT}"
    )
    assert config.transcription.is_configured and config.transcription.language == "pt"


@pytest.mark.parametrize(
    ("yaml_text", "secret", "key"),
    [
        ("web:\n  port: {secret}\n", "sk-proj-Q9wE7rT5yU3iO1pA8sD6fG4h", "web.port"),
        (
            "web:\n  port: '{secret}'\n",
            "7261530491:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0",
            "web.port",
        ),
        ("web:\n  port: {secret}\n", "xoxb-2048-4096-Zx9Lq2Wv7Rt4Kb8N", "web.port"),
        (
            "web:\n  enabled: {secret}\n",
            "lUrRIo3gSyCD_OLcGJ9N1uYmYKSt3UuE242h9DxSpb0",
            "web.enabled",
        ),
        ("app:\n  timezone: {secret}\n", "0f9e8d7c6b5a49382716a5b4c3d2e1f0", "app.timezone"),
        ("llm:\n  provider: {secret}\n", "sk-ant-api03-Zx9Lq2Wv7Rt4Kb8Nm3Pd6Hs1", "llm.provider"),
        (
            "agent:\n  max_turns: [{secret}]\n",
            "Yq7Wm2Kc9Rt4Lp1Zx8Nv3Bd6Hs0Fg5Jk",
            "agent.max_turns",
        ),
        ("web:\n  {secret}: 1\n", "Yq7Wm2Kc9Rt4Lp1Zx8Nv3Bd6Hs0Fg5Jk", "web.(key name hidden"),
    ],
    ids=[
        "openai-in-port",
        "telegram",
        "slack",
        "random-in-bool",
        "hex",
        "anthropic-literal",
        "in-a-list",
        "as-a-key-name",
    ],
)
def test_a_secret_looking_value_is_never_echoed_whatever_the_key(
    tmp_path: Path, yaml_text: str, secret: str, key: str
) -> None:
    message = error_of(tmp_path, yaml_text.format(secret=secret))

    assert message.startswith(key), message  # the key is still named
    assert secret not in message and secret[:10] not in message
    assert "hidden" in message


def test_an_ordinary_bad_value_is_still_shown(tmp_path: Path) -> None:
    message = error_of(tmp_path, "web:\n  port: eighty\nllm:\n  provider: claude-3-5-haiku\n")
    assert "'eighty'" in message and "'claude-3-5-haiku'" in message
