"""The measurements of `bench --engine llamacpp`: three `llama-server`s (no draft, the BF16 draft, OUT) on the same
target and prompts, greedy.

1. The first pass, one slot, prompt by prompt, the three servers in turn: each reply's tokens, llama.cpp's timings,
   and around it the server's /metrics (verify steps, accepted tokens per position) and the draft's cumulative
   statistics (ms drafting), so every count is one request's; the no-draft run also returns its top
   log-probabilities, which tell a near tie from a real difference. It also warms every server.
2. Timed passes: every prompt `repeats` times per server, the servers interleaved (each repetition in another order,
   a pause between servers); at one slot prompt by prompt, at N slots in waves of N sent at once. The generated
   tokens of every pass are checked against the first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from eagle3_quant.engines.llamacpp.server import LlamaServer, complete_all
from eagle3_quant.errors import EngineError

DRAFTS = ("none", "reference", "artifact")
TOP_PROBS = 5
PAUSE_S = 0.3          # between servers: the last one's threads stop polling for work (ggml's threadpool)


@dataclass(frozen=True)
class RequestRun:
    tokens: tuple[int, ...]
    seconds: float                        # the client's wall time, request sent to reply read
    prompt_ms: float                      # llama.cpp's timings
    predicted_ms: float
    predicted_n: int
    draft_n: int = 0
    draft_accepted: int = 0
    steps: int | None = None              # verify steps (/metrics), one slot only
    accepted_at: tuple[int, ...] = ()     # accepted at position i (/metrics)
    draft_ms: float | None = None         # the draft's drafting time (statistics `g`)
    top: tuple | None = None              # no-draft: per generated position ((id, logprob), ...)


@dataclass(frozen=True)
class TimedRuns:
    seconds: dict[str, list[list[float]]]   # draft -> [repetition][unit]: the client's wall time
    decode_ms: dict[str, list[list[float]]]   # draft -> [repetition][unit]: llama.cpp's ms a token after the first
    prompt_ms: dict[str, list[list[float]]]   # draft -> [repetition][unit]: llama.cpp's prompt time
    decode_tokens_per_s: dict[str, float]
    changed: dict[str, int]                 # one slot: replies differing from the first pass's (nondeterminism)
    requests: dict[str, list[RequestRun]]   # one slot: every timed request with its counters, repetitions pooled


@dataclass
class Measured:
    first: dict[str, list[RequestRun]] = field(default_factory=dict)      # draft -> per prompt
    timed: dict[int, TimedRuns] = field(default_factory=dict)          # slots -> the timed passes
    counters: dict[str, dict] = field(default_factory=dict)            # draft -> the first pass's metric deltas


def request_body(prompt: list[int], max_tokens: int, seed: int, probs: bool) -> dict:
    body = {"prompt": prompt, "n_predict": max_tokens, "temperature": 0.0, "top_k": 1, "samplers": ["top_k"],
            "seed": seed, "cache_prompt": False, "ignore_eos": True, "return_tokens": True}
    return body | ({"n_probs": TOP_PROBS} if probs else {})


def _top(reply: dict) -> tuple | None:
    rows = reply.get("completion_probabilities")
    if not isinstance(rows, list):
        return None
    return tuple(tuple((int(p["id"]), float(p["logprob"])) for p in row.get("top_logprobs") or ()) for row in rows)


def _run(reply: dict, seconds: float) -> RequestRun:
    timings = reply.get("timings") or {}
    tokens = reply.get("tokens")
    if not isinstance(tokens, list) or not timings:
        raise EngineError("llama-server's reply holds no tokens or timings")
    return RequestRun(tuple(int(t) for t in tokens), seconds, float(timings.get("prompt_ms", 0.0)),
                      float(timings.get("predicted_ms", 0.0)), int(timings.get("predicted_n", len(tokens))),
                      int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0)))


def _delta(after: dict[str, float], before: dict[str, float], name: str) -> int:
    return int(round(after.get(name, 0.0) - before.get(name, 0.0)))


def one_request(server: LlamaServer, name: str, body: dict, k: int, timeout_s: float) -> RequestRun:
    """One request and, around it (outside its wall time), the server's counters: at one slot they are this
    request's (verify steps, accepted per position, ms drafting), checked against the reply's own timings."""
    before, stats = server.metrics(), server.statistics()
    began = time.perf_counter()
    reply = server.complete(body, timeout_s)
    run = _run(reply, time.perf_counter() - began)
    after = server.metrics()
    if name == "none":
        return RequestRun(**{**run.__dict__, "top": _top(reply)})
    done = server.statistics()
    drafted = _delta(after, before, "spec_decode_num_draft_tokens_total")
    if drafted != run.draft_n or _delta(after, before, "spec_decode_num_accepted_tokens_total") != run.draft_accepted:
        raise EngineError(f"llama-server ({name}) counted {drafted} drafted tokens in /metrics but {run.draft_n} in "
                          "the reply's timings")
    accepted_at = tuple(_delta(after, before, f"spec_decode_num_accepted_tokens_per_pos_total[{j}]")
                        for j in range(k))
    return RequestRun(**{**run.__dict__, "steps": _delta(after, before, "spec_decode_num_drafts_total"),
                         "accepted_at": accepted_at,
                         "draft_ms": (done.draft_ms - (stats.draft_ms if stats else 0.0)) if done else None})


def first_pass(servers: dict[str, LlamaServer], prompts: list[list[int]], max_tokens: int, k: int, seed: int,
               timeout_s: float, advance: Callable[[int], None], probs: bool = True) -> Measured:
    """`probs`: the no-draft server also returns its top log-probabilities (which cost it time: never timed)."""
    measured = Measured(first={name: [] for name in servers})
    start = {name: server.metrics() for name, server in servers.items()}
    for i, prompt in enumerate(prompts):
        order = list(servers)[i % len(servers):] + list(servers)[:i % len(servers)]
        for name in order:
            body = request_body(prompt, max_tokens, seed, probs and name == "none")
            measured.first[name].append(one_request(servers[name], name, body, k, timeout_s))
        advance(1)
    for name, server in servers.items():
        end = server.metrics()
        measured.counters[name] = {
            "drafts": _delta(end, start[name], "spec_decode_num_drafts_total"),
            "draft_tokens": _delta(end, start[name], "spec_decode_num_draft_tokens_total"),
            "accepted": _delta(end, start[name], "spec_decode_num_accepted_tokens_total"),
            "accepted_per_position": [_delta(end, start[name], f"spec_decode_num_accepted_tokens_per_pos_total[{j}]")
                                      for j in range(k)]}
    return measured


def timed_passes(servers: dict[str, LlamaServer], prompts: list[list[int]], slots: int, repeats: int,
                 max_tokens: int, k: int, seed: int, timeout_s: float, expected: dict[str, list[RequestRun]] | None,
                 advance: Callable[[int], None]) -> TimedRuns:
    """Seconds per unit (a prompt at one slot, a wave of `slots` prompts at more), per repetition, per server; each
    server's decode tokens/s (llama.cpp's timings: tokens after the first over the time after it); at one slot, the
    replies whose tokens differ from the first pass's."""
    names = list(servers)
    waves = [prompts[i:i + slots] for i in range(0, len(prompts), slots)]
    seconds = {name: [] for name in names}
    decode = {name: [] for name in names}
    prompt = {name: [] for name in names}
    decoded = {name: [0, 0.0] for name in names}
    changed = {name: 0 for name in names}
    requests = {name: [] for name in names}
    for rep in range(repeats):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            time.sleep(PAUSE_S)
            row, decode_row, prompt_row, at = [], [], [], 0
            for wave in waves:
                bodies = [request_body(p, max_tokens, seed, False) for p in wave]
                if slots == 1:
                    runs = [one_request(servers[name], name, bodies[0], k, timeout_s)]
                    wall = runs[0].seconds
                    requests[name] += runs
                else:
                    replies, wall = complete_all(servers[name], bodies, timeout_s)
                    runs = [_run(reply, wall) for reply in replies]
                decode_row.append(sum(r.predicted_ms / max(r.predicted_n - 1, 1) for r in runs) / len(runs))
                prompt_row.append(sum(r.prompt_ms for r in runs) / len(runs))
                for run in runs:
                    if expected is not None and slots == 1 and run.tokens != expected[name][at].tokens:
                        changed[name] += 1
                    decoded[name][0] += max(run.predicted_n - 1, 0)
                    decoded[name][1] += run.predicted_ms / 1e3
                    at += 1
                row.append(wall)
                advance(len(wave))
            seconds[name].append(row)
            decode[name].append(decode_row)
            prompt[name].append(prompt_row)
    rates = {name: n / s if s else 0.0 for name, (n, s) in decoded.items()}
    return TimedRuns(seconds, decode, prompt, rates, changed, requests)
