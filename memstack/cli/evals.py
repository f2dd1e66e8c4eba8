"""``memstack eval`` and ``memstack calibrate``: measuring recall and fact extraction."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memstack.cli.app import app, cli_settings, console, error


@app.command("eval")
def eval_(
    dataset: Annotated[str, typer.Argument(help="locomo, longmemeval or facts")],
    data: Annotated[
        Path, typer.Option(help="Dataset file (.json or .json.gz; JSONL cases for facts).")
    ],
    semantic_budget: Annotated[
        int | None, typer.Option(help="Tokens of related history (default 1000 / 2000).")
    ] = None,
    limit: Annotated[
        int | None, typer.Option(help="Conversations (LoCoMo), questions or fact cases.")
    ] = None,
    top_k: Annotated[
        int | None,
        typer.Option(help="Candidates per recall channel (default: sized to the budget)."),
    ] = None,
    home: Annotated[
        Path | None, typer.Option(help="Embedded stores (default: a temp dir).")
    ] = None,
) -> None:
    """Evidence recall of context() on LoCoMo or LongMemEval, or fact extraction on cases
    of user messages (facts); last line is JSON."""
    if dataset == "facts":
        from memstack.eval.facts import run_cli as facts_cli

        if semantic_budget is not None or top_k is not None:
            raise error("--semantic-budget and --top-k are for recall evals")
        facts_cli(console, cli_settings(), data, limit, home)
        return
    from memstack.eval.recall import run_cli

    run_cli(console, cli_settings(), dataset, data, semantic_budget, limit, top_k, home)


@app.command()
def calibrate(
    queries: Annotated[Path | None, typer.Option(help="One query per line (needs --user).")] = None,
    user: Annotated[str | None, typer.Option(help="Whose memory to ask.")] = None,
    sample: Annotated[int, typer.Option(help="Ledger messages to sample as queries.")] = 200,
    drop: Annotated[float, typer.Option(help="Share of hits the cut should drop.")] = 0.4,
) -> None:
    """Distance distribution of sample queries and the cut dropping ~40%."""
    from memstack.ops.calibrate import calibrate_cli

    calibrate_cli(console, cli_settings(), queries, user, sample, drop)
