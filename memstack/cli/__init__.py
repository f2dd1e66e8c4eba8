"""The ``memstack`` command line (typer + rich): one module per group of commands, each
registering its commands on the one app."""

from memstack.cli import admin, evals, init, kb, keys, manage, services, status, transfer
from memstack.cli.app import app

__all__ = ["app", "main"]
_COMMANDS = (admin, evals, init, kb, keys, manage, services, status, transfer)


def main() -> None:
    app()
