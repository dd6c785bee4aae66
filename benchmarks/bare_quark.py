"""Quark's own file-to-file PTPC call, the script `eagle3-quant quantize` is measured against.

Usage: python benchmarks/bare_quark.py SRC OUT [EXCLUDED_MODULE ...]
What Quark's file-to-file example does, minus its argument parsing: `import quark.torch` with Quark's defaults
(its own logging: QUARK_LOG_LEVEL=error would add ~5 s, see quantize/quark_import.py), the PTPC config,
`ModelQuantizer(config).direct_quantize_checkpoint(..., device="cpu")`; the same exclude list as eagle3-quant.
"""

import json
import sys
import time


def main(src: str, out: str, exclude: list[str]) -> None:
    started = time.perf_counter()
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
