"""What ``memstack config`` shows: every setting's value in effect and where it came from,
secrets masked, and the ``MEMSTACK_*`` variables no setting reads — a typo such as
``MEMSTACK_LOCAL`` is otherwise ignored without a word and its setting left at its
default."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from dotenv import dotenv_values
from pydantic import SecretStr

from memstack.core.settings import Settings

PREFIX = "MEMSTACK_"
MASK = "****"


@dataclass(frozen=True)
class Shown:
    variable: str
    value: str
    source: str  # "env", ".env" or "default"


@dataclass(frozen=True)
class Unknown:
    variable: str
    source: str
    suggestion: str | None  # the nearest variable a setting reads, when one is near


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


def dotenv_file(path: Path = Path(".env")) -> dict[str, str]:
    """The ``.env`` file pydantic-settings reads, as it reads it (none: empty)."""
    if not path.is_file():
        return {}
    return {k: v for k, v in dotenv_values(path).items() if v is not None}


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
    found = [(v, "env") for v in environ] + [(v, ".env") for v in dotenv if v not in environ]
    out = []
    for variable, source in sorted(found):
        if variable.upper().startswith(PREFIX) and variable.upper() not in known:
            near = difflib.get_close_matches(variable.upper(), known, n=1, cutoff=0.8)
            out.append(Unknown(variable, source, near[0] if near else None))
    return out
