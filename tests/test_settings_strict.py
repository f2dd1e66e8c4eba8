"""Settings are strict: a server URL is checked part by part when the settings are read
(a malformed one refused naming the part, never guessed), and a ``MEMSTACK_*`` variable
no setting reads is warned about, once."""

from __future__ import annotations

import warnings
from pathlib import Path

import pydantic
import pytest

from memstack.core import environment
from memstack.core.environment import UnknownSettingWarning
from memstack.core.errors import ConfigError
from memstack.core.settings import Settings, load_settings
from memstack.core.urls import masked

SECRET = "s3cretpw"

# (setting, URL, the words the error must name). Every URL carries the password, which
# no message may repeat.
MALFORMED = [
    ("redis_url", f"redis://:{SECRET}@cache:6379/abc", "database part"),
    ("redis_url", f"redis://:{SECRET}@cache:6379/1x", "database part"),
    ("redis_url", f"redis://:{SECRET}@cache:6379/-1", "database part"),
    ("redis_url", f"redis://:{SECRET}@cache:6379/0/1", "database part"),
    ("redis_url", f"redis://:{SECRET}@cache:6379/?db=two", "database part"),
    ("redis_url", f"redis://:{SECRET}@cache:6379/1?db=2", "database part"),
    ("redis_url", f"redis://:{SECRET}@cache:port/0", "port part"),
    ("redis_url", f"redis://:{SECRET}@cache:70000/0", "port part"),
    ("redis_url", f"redis://:{SECRET}@cache:0/0", "port part"),
    ("redis_url", f"redis://:{SECRET}@:6379/0", "host part"),
    ("redis_url", f"http://:{SECRET}@cache:6379/0", "scheme 'http'"),
    ("redis_url", f"cache:6379/0?password={SECRET}", "scheme is missing"),
    ("redis_url", f"unix://:{SECRET}@", "socket path"),
    ("redis_url", f"redis://:{SECRET}@cache:6379/0 ", "space"),
    ("database_url", f"postgresql://memstack:{SECRET}@db:5432", "database name"),
    ("database_url", f"postgresql://memstack:{SECRET}@db:5432/", "database name"),
    ("database_url", f"postgres://memstack:{SECRET}@db", "database name"),
    ("database_url", f"postgresql://memstack:{SECRET}@db:notaport/memstack", "port part"),
    ("database_url", f"postgresql://memstack:{SECRET}@db:123456/memstack", "port part"),
    ("database_url", f"mysql://memstack:{SECRET}@db/memstack", "scheme 'mysql'"),
    ("database_url", f"db.internal/memstack?password={SECRET}", "scheme is missing"),
    ("database_url", f"postgresql://memstack:{SECRET}@[db/memstack", "host part"),
    ("database_url", f"postgresql://memstack:{SECRET}@:5432/memstack", "host part"),
    ("database_url", "sqlite://", "file path"),
    ("database_url", "sqlite:///:memory:", "file path"),
    ("vector_url", f"ftp://memstack:{SECRET}@chroma:8000", "scheme 'ftp'"),
    ("vector_url", f"http://memstack:{SECRET}@chroma:eight", "port part"),
    ("kb_url", f"http://memstack:{SECRET}@:6333", "host part"),
    ("llm_url", f"llm.internal/v1?key={SECRET}", "scheme is missing"),
    ("embed_url", f"https://memstack:{SECRET}@embed:99999/v1", "port part"),
]


@pytest.mark.parametrize(("field", "url", "part"), MALFORMED)
def test_a_malformed_url_is_refused_naming_its_part(field: str, url: str, part: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(**{field: url})
    message = str(caught.value)
    assert message.startswith(f"MEMSTACK_{field.upper()}: "), message
    assert part in message, message
    assert "expected" in message  # and what a good one looks like
    assert SECRET not in message


@pytest.mark.parametrize(("field", "url", "part"), MALFORMED)
def test_settings_built_directly_refuse_it_too_without_the_value(
    field: str, url: str, part: str
) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        Settings(**{field: url})  # type: ignore[arg-type]
    assert part in str(caught.value) and SECRET not in str(caught.value)


def test_the_offending_part_is_quoted_when_the_url_holds_no_password() -> None:
    with pytest.raises(ConfigError, match="the database part 'abc' is not a number"):
        load_settings(redis_url="redis://cache:6379/abc")
    with pytest.raises(ConfigError, match="the port part '65536'"):
        load_settings(database_url="postgresql://memstack@db:65536/memstack")


@pytest.mark.parametrize(
    ("field", "url"),
    [
        ("redis_url", "redis://127.0.0.1:6379"),
        ("redis_url", "redis://127.0.0.1:6379/"),
        ("redis_url", f"redis://:{SECRET}@cache:6379/15"),
        ("redis_url", "rediss://user:pw@cache.example.com:6380/2"),
        ("redis_url", "redis://cache/3?socket_timeout=2"),
        ("redis_url", "redis://[::1]:6379/0"),
        ("redis_url", "unix:///run/redis/redis.sock?db=4"),
        ("database_url", "postgresql://memstack@db:5432/memstack"),
        ("database_url", f"postgresql+psycopg://memstack:{SECRET}@db/memstack?sslmode=require"),
        ("database_url", "postgres://memstack@db/memstack"),
        ("database_url", "postgresql:///memstack?host=/run/postgresql"),
        ("database_url", "postgresql:///memstack"),  # libpq's local socket
        ("database_url", "sqlite:///memstack.db"),
        ("database_url", "sqlite:////var/lib/memstack/memstack.db"),
        ("vector_url", "http://chroma:8000"),
        ("vector_url", "localhost:6333"),
        ("kb_url", "https://qdrant.example.com"),
        ("llm_url", "http://127.0.0.1:11434/v1"),
        ("redis_url", ""),  # unset: the embedded Redis
    ],
)
def test_well_formed_urls_are_taken_as_written(field: str, url: str) -> None:
    assert getattr(load_settings(**{field: url}), field) == url


def test_a_cluster_has_database_zero_only() -> None:
    with pytest.raises(ConfigError, match="other than 0"):
        load_settings(redis_url="redis://node:7000/3", redis_cluster=True)
    assert load_settings(redis_url="redis://node:7000/0", redis_cluster=True).redis_cluster


def test_the_url_from_the_environment_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSTACK_REDIS_URL", "redis://cache:6379/abc")
    with pytest.raises(ConfigError, match=r"^MEMSTACK_REDIS_URL: the database part"):
        load_settings()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"redis://:{SECRET}@cache:6379/0", "redis://:****@cache:6379/0"),
        (f"postgresql://memstack:{SECRET}@db/memstack", "postgresql://memstack:****@db/memstack"),
        (f"redis://:a/b@c{SECRET}@cache:6379/0", "redis://:****@cache:6379/0"),
        ("redis://cache:6379/0", "redis://cache:6379/0"),
        ("postgresql://memstack@db/memstack", "postgresql://memstack@db/memstack"),
    ],
)
def test_masked_urls_hide_the_password_only(url: str, shown: str) -> None:
    assert masked(url) == shown


# --- unknown variables -------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No MEMSTACK_* variable but the test's, no .env, nothing warned about before."""
    for name in [n for n in __import__("os").environ if n.upper().startswith("MEMSTACK_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(environment, "_warned", set())
    return monkeypatch


def _unknown_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, UnknownSettingWarning)]


def test_an_unknown_variable_is_warned_about_once_with_the_near_setting(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("MEMSTACK_REDIS_ULR", "redis://cache:6379/0")
    clean_env.setenv("MEMSTACK_WINDOW_TURN", "5")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        load_settings()
        load_settings()
    assert _unknown_warnings(record) == [
        "MEMSTACK_REDIS_ULR (env) is ignored: no setting reads it; "
        "did you mean MEMSTACK_REDIS_URL?",
        "MEMSTACK_WINDOW_TURN (env) is ignored: no setting reads it; "
        "did you mean MEMSTACK_WINDOW_TURNS?",
    ]


def test_an_unknown_variable_far_from_any_setting_and_one_in_dotenv(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("MEMSTACK_ZZZ_QQQ", "1")
    (tmp_path / ".env").write_text("MEMSTACK_BUDGET_TOKEN=3000\nMEMSTACK_KB_TOP_K=7\n")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        settings = load_settings()
    assert settings.kb_top_k == 7
    assert _unknown_warnings(record) == [
        "MEMSTACK_BUDGET_TOKEN (.env) is ignored: no setting reads it; "
        "did you mean MEMSTACK_BUDGET_TOKENS?",
        "MEMSTACK_ZZZ_QQQ (env) is ignored: no setting reads it",
    ]


def test_settings_and_memstacks_own_variables_are_not_warned_about(
    clean_env: pytest.MonkeyPatch,
) -> None:
    for name, value in [
        ("MEMSTACK_LOCALE", "en"),
        ("MEMSTACK_DEBUG", "1"),
        ("MEMSTACK_REQUIRE_SERVICES", "1"),
        ("MEMSTACK_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"),
        ("MEMSTACK_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    ]:
        clean_env.setenv(name, value)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        load_settings()
    assert _unknown_warnings(record) == []
