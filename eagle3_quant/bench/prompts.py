"""`bench`'s prompts as token ids, from a calibration set (its prompts: each sample up to where the target's own
continuation starts), a ``.safetensors`` file with an integer ``prompts`` tensor [N, P] (the tiny pair's held-out
prompts), or a dataset read the way `calibrate --data` reads it (the target's tokenizer and chat template)."""

from __future__ import annotations

from pathlib import Path

from eagle3_quant.bench.options import BenchOptions
from eagle3_quant.calib.prompts import PromptSpec, sample_prompts
from eagle3_quant.calib.target import TargetSpec, load_tokenizer
from eagle3_quant.calib.token_prompts import is_token_prompts, read_token_prompts
from eagle3_quant.errors import CalibrationDataError, OptionsError
from eagle3_quant.records.calibration import INDEX_NAME, load_calibration
from eagle3_quant.records.public_names import public_name


def _from_calibration(folder: Path, count: int, cut: int) -> list[list[int]]:
    prompts = []
    for sample in load_calibration(folder).samples():
        end = sample.generated_from if sample.generated_from else min(cut, len(sample.input_ids))
        prompts.append(sample.input_ids[:end].tolist())
        if len(prompts) >= count:
            break
    return prompts


def load_prompts(opts: BenchOptions, target: TargetSpec) -> tuple[list[list[int]], str]:
    """(the first `num_prompts` prompts, the source's public name); refused when empty or outside the target's
    vocabulary."""
    if not opts.prompts:
        raise OptionsError("bench needs prompts", field="prompts",
                           hint="pass --prompts with a calibration set, a .safetensors of token ids or a dataset")
    source = Path(opts.prompts).expanduser()
    if (source / INDEX_NAME).is_file():
        prompts = _from_calibration(source, opts.num_prompts, opts.prompt_len)
    elif is_token_prompts(source):
        prompts = read_token_prompts(source, opts.num_prompts)
    else:
        spec = PromptSpec(str(source.resolve()) if source.exists() else opts.prompts, opts.num_prompts,
                          opts.prompt_len + opts.max_tokens, opts.seed, generate_tokens=opts.max_tokens)
        prompts = [list(p) for p in sample_prompts(spec, load_tokenizer(target)).prompts]
    prompts = [p for p in prompts if p]
    if not prompts:
        raise CalibrationDataError("holds no prompt", path=opts.prompts)
    top = max(max(p) for p in prompts)
    if top >= target.vocab_size or min(min(p) for p in prompts) < 0:
        raise CalibrationDataError(f"token id {top} is outside the target's vocabulary of {target.vocab_size}",
                                   path=opts.prompts, hint="prompts tokenized for another model?")
    return prompts, public_name(opts.prompts) or ""
