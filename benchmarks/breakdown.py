"""Where `quantize_draft` spends its time. Usage: python -m benchmarks.breakdown SRC OUT -> JSON on the last line."""

import json
import sys
import time


def main(src: str, out: str) -> None:
    started = time.perf_counter()
    from eagle3_quant.quantize.api import quantize_draft

    imported = time.perf_counter() - started
    result = quantize_draft(src, out, device="cpu", force=True)
    print(json.dumps({"import eagle3_quant": round(imported, 4), **{k: round(v, 4) for k, v in result.timings.items()},
                      "total": round(result.seconds, 4)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
