from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.cli.app import app


@app.command("push")
def push_command(
    out: Annotated[Path, typer.Argument(help="Quantized draft folder (made by quantize, checked by validate).")],
    repo_id: Annotated[str, typer.Option("--repo-id", help="Hub repository ORG/NAME (created if missing).")],
    revision: Annotated[str | None, typer.Option(help="Branch to push to (created from main if missing).")] = None,
    create_pr: Annotated[bool, typer.Option("--create-pr", help="Open a pull request against main.")] = False,
    private: Annotated[bool, typer.Option("--private", help="Create the repository private.")] = False,
    tag: Annotated[str | None, typer.Option(help="Tag the pushed commit (never moves an existing tag).")] = None,
    commit_message: Annotated[str | None, typer.Option(help="Commit title (default names scheme, source, "
                                                             "tool version).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the files, sizes and card; send nothing.")]
    = False,
    allow_unvalidated: Annotated[bool, typer.Option(
        "--allow-unvalidated", help="Publish without a passing validation report (the card says so).")] = False,
    target: Annotated[str | None, typer.Option(help="Target model the draft serves (for the card).")] = None,
    base_model: Annotated[str | None, typer.Option(help="Hub id of the BF16 draft when OUT was made from a "
                                                         "local folder.")] = None,
) -> None:
    """Publish OUT on the Hub with a generated model card (HF_TOKEN or `hf auth login`; HF_ENDPOINT honoured)."""
    from eagle3_quant.cli.render_publish import print_push
    from eagle3_quant.export.push import push_draft

    print_push(push_draft(out, repo_id, revision=revision, create_pr=create_pr, private=private, tag=tag,
                          commit_message=commit_message, dry_run=dry_run, allow_unvalidated=allow_unvalidated,
                          target=target, base_model=base_model))
