"""``MEMSTACK_*`` variables that no setting reads.

pydantic-settings ignores them, so a typo such as ``MEMSTACK_REDIS_ULR`` would leave
its setting at the default (here: the embedded Redis) without a word. Settings name
them when they are read (a warning, once per variable and process), and
``memstack config`` lists them.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PREFIX = "MEMSTACK_"
# Variables memstack reads that are no setting: the command line's --debug and the
# test suite's (README, Tests).
OTHER_VARIABLES = frozenset(
    {
        "MEMSTACK_DEBUG",
        "MEMSTACK_REQUIRE_SERVICES",
        "MEMSTACK_TEST_PG_URL",
        "MEMSTACK_TEST_REDIS_URL",
    }
)
_warned: set[str] = set()


class UnknownSettingWarning(UserWarning):
    """A ``MEMSTACK_*`` variable is set that no setting reads."""


@dataclass(frozen=True)
class Unknown:
    variable: str
    source: str  # "env" or ".env"
    suggestion: str | None  # the nearest variable a setting reads, when one is near

    @property
    def hint(self) -> str:
        return f"; did you mean {self.suggestion}?" if self.suggestion else ""


def dotenv_file(path: Path = Path(".env")) -> dict[str, str]:
    """The ``.env`` file pydantic-settings reads, as it reads it (none: empty)."""
    if not path.is_file():
        return {}
    from dotenv import dotenv_values

    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def unknown_variables(
    known: Iterable[str], environ: Mapping[str, str], dotenv: Mapping[str, str]
) -> list[Unknown]:
    """The ``MEMSTACK_*`` names in ``environ`` and ``dotenv`` that are neither in
    ``known`` nor one of memstack's other variables, each with the nearest known one."""
    names = sorted(known)
    found = [(v, "env") for v in environ] + [(v, ".env") for v in dotenv if v not in environ]
    out = []
    for variable, source in sorted(found):
        upper = variable.upper()
        if upper.startswith(PREFIX) and upper not in names and upper not in OTHER_VARIABLES:
            near = difflib.get_close_matches(upper, names, n=1, cutoff=0.75)
            out.append(Unknown(variable, source, near[0] if near else None))
    return out


def warn_unknown_variables(known: Iterable[str], environ: Mapping[str, str], dotenv: Path) -> None:
    """An :class:`UnknownSettingWarning` for each unknown variable not warned about
    before in this process."""
    for unknown in unknown_variables(known, environ, dotenv_file(dotenv)):
        if unknown.variable in _warned:
            continue
        _warned.add(unknown.variable)
        warnings.warn(
            f"{unknown.variable} ({unknown.source}) is ignored: no setting reads it{unknown.hint}",
            UnknownSettingWarning,
            stacklevel=3,
        )
