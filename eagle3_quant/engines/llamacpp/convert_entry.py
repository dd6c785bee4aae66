"""Runs llama.cpp's own converter, ``convert_hf_to_gguf.py``, as its ``__main__`` (run by path in eagle3-quant's
Python, which holds the torch, transformers, numpy and sentencepiece it imports; its gguf-py first on the path).

``python convert_entry.py SOURCE PRE_TOKENIZER -- CONVERTER_ARGS...``. PRE_TOKENIZER ``-`` changes nothing; a name
(``gpt-2``, ``llama-bpe``, ...) is what the converter records as ``tokenizer.ggml.pre`` when it does not recognise
the target's BPE pre-tokenizer (`TextModel.get_vocab_base_pre` raises "BPE pre-tokenizer was not recognized"):
a tokenizer trained for the target, which its list of known hashes cannot hold.
"""

import runpy
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    source, pre_tokenizer, separator, *args = argv
    assert separator == "--", "usage: convert_entry.py SOURCE PRE_TOKENIZER -- CONVERTER_ARGS..."
    source = Path(source)
    sys.path[:0] = [str(source), str(source / "gguf-py")]
    if pre_tokenizer != "-":
        from conversion import base

        recognised = base.TextModel.get_vocab_base_pre

        def named(self, tokenizer):
            try:
                return recognised(self, tokenizer)
            except NotImplementedError:
                return pre_tokenizer

        base.TextModel.get_vocab_base_pre = named
    script = source / "convert_hf_to_gguf.py"
    sys.argv = [str(script), *args]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
