"""Server counters in the Prometheus text format: requests by endpoint and status, tokens,
the recent decode rate, queue depth, live generations, time to first token, memory."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter, deque

RATE_WINDOW_S = 10.0  # tokens/s is measured over this many recent seconds


def resident_memory_bytes() -> int:
    """This process's resident set size (0 where /proc is absent)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Metrics:
    """Counters updated by the app (requests) and the engine thread (tokens, load)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter = Counter()  # (endpoint, status) -> count
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cancelled = 0
        self.queue_depth = 0
        self.active = 0
        self.first_token_seconds_sum = 0.0
        self.first_token_count = 0
        self._token_times: deque[float] = deque()
        self.steps = 0
        self.step_rows = 0
        self.step_requests = 0
        self.last_batch = 0
        self.preemptions = 0
        self.cached_prompt_tokens = 0
        self.blocks = None  # the engine's BlockManager, read when rendered

    def count_request(self, endpoint: str, status: int) -> None:
        with self._lock:
            self.requests[(endpoint, status)] += 1

    def count_token(self) -> None:
        now = time.monotonic()
        with self._lock:
            self._token_times.append(now)
            while self._token_times and self._token_times[0] < now - RATE_WINDOW_S:
                self._token_times.popleft()

    def count_request_tokens(self, prompt: int, completion: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt
            self.completion_tokens += completion

    def first_token(self, seconds: float) -> None:
        with self._lock:
            self.first_token_seconds_sum += seconds
            self.first_token_count += 1

    def count_step(self, rows: int, requests: int) -> None:
        """One forward of ``rows`` token rows for ``requests`` requests."""
        with self._lock:
            self.steps += 1
            self.step_rows += rows
            self.step_requests += requests
            self.last_batch = requests

    def set_load(self, queue_depth: int, active: int) -> None:
        self.queue_depth, self.active = queue_depth, active

    def tokens_per_second(self) -> float:
        """Tokens generated per second over the last RATE_WINDOW_S seconds."""
        now = time.monotonic()
        with self._lock:
            recent = [t for t in self._token_times if t >= now - RATE_WINDOW_S]
        return len(recent) / RATE_WINDOW_S

    def render(self, slots: int) -> str:
        """Every metric in the Prometheus text exposition format."""
        lines = ["# HELP fuel_requests_total HTTP requests by endpoint and status.",
                 "# TYPE fuel_requests_total counter"]
        with self._lock:
            requests = sorted(self.requests.items())
        for (endpoint, status), count in requests:
            lines.append(f'fuel_requests_total{{endpoint="{endpoint}",status="{status}"}} '
                         f"{count}")
        gauges = [
            ("fuel_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
             self.prompt_tokens),
            ("fuel_completion_tokens_total", "counter", "Generated tokens of finished requests.",
             self.completion_tokens),
            ("fuel_cancelled_requests_total", "counter",
             "Generations dropped because their client went away.", self.cancelled),
            ("fuel_tokens_per_second", "gauge",
             f"Tokens generated per second over the last {RATE_WINDOW_S:g} s.",
             round(self.tokens_per_second(), 3)),
            ("fuel_queue_depth", "gauge", "Requests waiting for a generation slot.",
             self.queue_depth),
            ("fuel_active_generations", "gauge", "Generations in progress.", self.active),
            ("fuel_generation_slots", "gauge", "Generations that may run at once.", slots),
            ("fuel_time_to_first_token_seconds_sum", "counter",
             "Total seconds from queueing to the first token.",
             round(self.first_token_seconds_sum, 6)),
            ("fuel_time_to_first_token_seconds_count", "counter",
             "Requests that got a first token.", self.first_token_count),
            ("fuel_resident_memory_bytes", "gauge", "Resident memory of the server process.",
             resident_memory_bytes()),
        ]
        blocks = self.blocks
        if blocks is not None:
            gauges += [
                ("fuel_kv_blocks_total", "gauge", "KV blocks in the pool (one is reserved).",
                 blocks.blocks),
                ("fuel_kv_blocks_used", "gauge", "KV blocks held by live requests.",
                 blocks.used),
                ("fuel_kv_blocks_cached", "gauge",
                 "KV blocks no request holds, kept for prefix reuse.", blocks.cached),
                ("fuel_kv_block_size", "gauge", "Positions per KV block.", blocks.block_size),
                ("fuel_prefix_cache_queries_total", "counter",
                 "Admissions that looked for a cached prefix.", blocks.prefix_queries),
                ("fuel_prefix_cache_hits_total", "counter",
                 "Admissions that found a cached prefix.", blocks.prefix_hits),
            ]
        gauges += [
            ("fuel_prefix_cache_hit_tokens_total", "counter",
             "Prompt tokens taken from cached blocks instead of computed.",
             self.cached_prompt_tokens),
            ("fuel_steps_total", "counter", "Forwards run (one per engine step).", self.steps),
            ("fuel_step_rows_total", "counter", "Token rows run over all steps.",
             self.step_rows),
            ("fuel_step_requests_total", "counter",
             "Requests in a step, summed over steps (divide by steps: the mean batch size).",
             self.step_requests),
            ("fuel_batch_size", "gauge", "Requests in the last step.", self.last_batch),
            ("fuel_preemptions_total", "counter",
             "Requests preempted (blocks given back, recomputed later).", self.preemptions),
        ]
        for name, kind, text, value in gauges:
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        return "\n".join(lines) + "\n"
