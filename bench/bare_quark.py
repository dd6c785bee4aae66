"""Quark's bare file-to-file PTPC call, the floor `eagle3-quant quantize` is measured against.

Usage: python bench/bare_quark.py SRC OUT [EXCLUDED_MODULE ...]
Same import as eagle3-quant (quark.torch, QUARK_LOG_LEVEL=error), same PTPC config, same exclude list.
"""

import json
import os
import sys
import time


def main(src: str, out: str, exclude: list[str]) -> None:
    started = time.perf_counter()
    os.environ.setdefault("QUARK_LOG_LEVEL", "error")
    from quark.torch import ModelQuantizer
    from quark.torch.quantization.config.config import FP8E4M3PerChannelSpec, QConfig, QLayerConfig

    weight = FP8E4M3PerChannelSpec(ch_axis=0, is_dynamic=False).to_quantization_spec()
    per_token = FP8E4M3PerChannelSpec(ch_axis=1, is_dynamic=True).to_quantization_spec()
    config = QConfig(global_quant_config=QLayerConfig(weight=weight, input_tensors=per_token), exclude=exclude)
    imported = time.perf_counter()
    ModelQuantizer(config).direct_quantize_checkpoint(pretrained_model_path=src, save_path=out, device="cpu")
    print(json.dumps({"import quark.torch": round(imported - started, 4),
                      "quark": round(time.perf_counter() - imported, 4)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
