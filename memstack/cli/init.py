"""``memstack init --servers``: write the env file every process of a server deployment
loads, so the API and its workers cannot end up on different stores."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from memstack.cli.app import app, console, fail
from memstack.core.errors import ConfigError, MemstackError

_URL_HELP = "Written as a placeholder (a local default, marked) when not given."


@app.command()
def init(
    servers: Annotated[
        bool,
        typer.Option(
            "--servers", help="Write the env file of a server deployment (the only kind)."
        ),
    ] = False,
    output: Annotated[Path, typer.Option("--output", "-o", help="The env file to write.")] = (
        Path("memstack.env")
    ),
    force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
    redis_url: Annotated[
        str | None, typer.Option(help=f"A Redis with appendonly yes. {_URL_HELP}")
    ] = None,
    database_url: Annotated[
        str | None, typer.Option(help=f"A PostgreSQL database. {_URL_HELP}")
    ] = None,
    vector_store: Annotated[
        Literal["chroma", "qdrant"], typer.Option(help="Semantic memory's vector server.")
    ] = "chroma",
    vector_url: Annotated[
        str | None, typer.Option(help=f"The `chroma run` or Qdrant server. {_URL_HELP}")
    ] = None,
    kb_store: Annotated[
        Literal["chroma", "qdrant"] | None,
        typer.Option(help="The knowledge base's vector server (default: --vector-store)."),
    ] = None,
    kb_url: Annotated[
        str | None, typer.Option(help="The knowledge base's server (default: --vector-url).")
    ] = None,
    home: Annotated[
        Path | None,
        typer.Option(help="MEMSTACK_HOME, made absolute (default: .memstack beside the file)."),
    ] = None,
) -> None:
    """Write an env file (default memstack.env) with every setting a server deployment's
    processes must share: the Redis, PostgreSQL, vector and knowledge-base servers, one
    absolute MEMSTACK_HOME and a generated API token. Each process then loads it
    (`set -a; . ./memstack.env; set +a`)."""
    from memstack.ops.server_env import ServerSetup, write

    if not servers:
        raise fail(
            ConfigError(
                "the embedded default needs no configuration (try `memstack demo`); "
                "`memstack init --servers` writes a server deployment's env file"
            ),
            2,
        )
    setup = ServerSetup(
        home=(home or output.parent / ".memstack").resolve(),
        redis_url=redis_url,
        database_url=database_url,
        vector_store=vector_store,
        vector_url=vector_url,
        kb_store=kb_store,
        kb_url=kb_url,
    )
    try:
        write(output, setup, force=force)
    except FileExistsError:
        raise fail(ConfigError(f"{output} exists; --force overwrites it"), 2) from None
    except MemstackError as exc:
        raise fail(exc, 2) from exc
    placeholders = [
        name
        for name, given in (
            ("--redis-url", redis_url),
            ("--database-url", database_url),
            ("--vector-url", vector_url),
        )
        if not given
    ]
    console.print(f"wrote {output} (readable by you only: it holds the API token)")
    if placeholders:
        console.print(f"placeholders to replace: {', '.join(placeholders)} (marked in the file)")
    # Absolute: `. name` searches PATH, and processes are started from other folders.
    console.print(f"load it in each process: set -a; . {output.resolve()}; set +a", soft_wrap=True)
    console.print("then: memstack db upgrade; memstack doctor; memstack serve; memstack worker")
