"""`PushOptions`: everything `push_draft` takes besides OUT and the repo id, with defaults and help."""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_quant.options import option


@dataclass(frozen=True)
class PushOptions:
    revision: str | None = option(None, "Branch to push to (created from main if missing).")
    create_pr: bool = option(False, "Open a pull request against main.")
    private: bool = option(False, "Create the repository private.")
    tag: str | None = option(None, "Tag the pushed commit (never moves an existing tag).")
    commit_message: str | None = option(None, "Commit title (default names scheme, source, tool version).")
    dry_run: bool = option(False, "Print the files, sizes and card; send nothing.")
    allow_unvalidated: bool = option(False, "Publish without a passing validation report (the card says so).")
    allow_unmeasured: bool = option(False, "Publish although the acceptance was measured neither offline "
                                           "(validate --calib) nor in vLLM's engine (bench); the card says so at "
                                           "its top.")
    target: str | None = option(None, "Hub id of the target model the draft serves (for the card; default: the "
                                      "one recorded by validate or calibrate).")
    base_model: str | None = option(None, "Hub id of the BF16 draft when OUT was made from a local folder.")
    pipeline: str | None = option(None, "The pipeline file this push belongs to (for the card).", pipeline=False)
