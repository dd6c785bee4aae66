from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.cli.app import verb
from eagle3_quant.export.options import PushOptions as P
from eagle3_quant.options import default_of as default
from eagle3_quant.options import help_of


@verb("push")
def push_command(
    out: Annotated[Path, typer.Argument(help="Quantized draft folder (made by quantize, checked by validate).")],
    repo_id: Annotated[str, typer.Option("--repo-id", help="Hub repository ORG/NAME (created if missing).")],
    revision: Annotated[str | None, typer.Option(help=help_of(P, "revision"))] = default(P, "revision"),
    create_pr: Annotated[bool, typer.Option("--create-pr", help=help_of(P, "create_pr"))] = default(P, "create_pr"),
    private: Annotated[bool, typer.Option("--private", help=help_of(P, "private"))] = default(P, "private"),
    tag: Annotated[str | None, typer.Option(help=help_of(P, "tag"))] = default(P, "tag"),
    commit_message: Annotated[str | None, typer.Option(help=help_of(P, "commit_message"))]
    = default(P, "commit_message"),
    dry_run: Annotated[bool, typer.Option("--dry-run", help=help_of(P, "dry_run"))] = default(P, "dry_run"),
    allow_unvalidated: Annotated[bool, typer.Option("--allow-unvalidated", help=help_of(P, "allow_unvalidated"))]
    = default(P, "allow_unvalidated"),
    allow_unmeasured: Annotated[bool, typer.Option("--allow-unmeasured", help=help_of(P, "allow_unmeasured"))]
    = default(P, "allow_unmeasured"),
    target: Annotated[str | None, typer.Option(help=help_of(P, "target"))] = default(P, "target"),
    base_model: Annotated[str | None, typer.Option(help=help_of(P, "base_model"))] = default(P, "base_model"),
) -> None:
    """Publish OUT on the Hub with a generated model card (HF_TOKEN or `hf auth login`; HF_ENDPOINT honoured).
    Refused unless OUT's acceptance was measured: `validate --calib` or `bench` (else --allow-unmeasured)."""
    from eagle3_quant.cli.render_publish import print_push
    from eagle3_quant.export.push import push_draft

    options = P(revision=revision, create_pr=create_pr, private=private, tag=tag, commit_message=commit_message,
                dry_run=dry_run, allow_unvalidated=allow_unvalidated, allow_unmeasured=allow_unmeasured,
                target=target, base_model=base_model)
    print_push(push_draft(out, repo_id, options))
