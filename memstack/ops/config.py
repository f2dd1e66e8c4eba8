"""What ``memstack config`` shows: every setting's value in effect and where it came from,
secrets masked, and the ``MEMSTACK_*`` variables no setting reads — a typo such as
``MEMSTACK_LOCAL`` is otherwise ignored without a word and its setting left at its
default."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr

from memstack.core import environment
from memstack.core.environment import PREFIX, Unknown, dotenv_file
from memstack.core.settings import Settings

__all__ = ["Shown", "Unknown", "dotenv_file", "unknown_variables", "values_in_effect"]
MASK = "****"


@dataclass(frozen=True)
class Shown:
    variable: str
    value: str
    source: str  # "env", ".env" or "default"


def _masked_url(url: str) -> str:
    """A URL with its password (and a key in its query string) hidden."""
    parts = urlsplit(url)
    if parts.password is None and not parts.query:
        return url
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", f":{MASK}@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, MASK if parts.query else "", ""))


def _shown(name: str, value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, SecretStr) or name.endswith(("_api_key", "_token", "_password")):
        return MASK
    if name.endswith("_url") and isinstance(value, str):
        return _masked_url(value)
    return str(value)


def values_in_effect(
    settings: Settings, environ: Mapping[str, str], dotenv: Mapping[str, str]
) -> list[Shown]:
    rows = []
    for name in Settings.model_fields:
        variable = PREFIX + name.upper()
        source = "env" if variable in environ else ".env" if variable in dotenv else "default"
        rows.append(Shown(variable, _shown(name, getattr(settings, name)), source))
    return rows


def unknown_variables(environ: Mapping[str, str], dotenv: Mapping[str, str]) -> list[Unknown]:
    known = [PREFIX + name.upper() for name in Settings.model_fields]
    return environment.unknown_variables(known, environ, dotenv)
