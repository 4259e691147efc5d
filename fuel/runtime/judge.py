"""The judge: where sibling kernels compete, time them on the real operands and dispatch the
winner.

A key of the binding table may hold several kernels that compute the same thing (siblings),
and a kernel may offer several ways to run one launch (its ``variants``: the float32 matmul's
OpenBLAS and C forms on N threads or one). Each kernel's own measured rule picks a default.
The judge replaces that rule where it can measure: the first time a launch of a *shape
bucket* runs (the walk of a fresh plan; a plan bound ahead of its launches times at its first
launch, on the operands then computed), it runs every candidate a few times on that launch's
operands within the process's time budget, takes medians and switches away from the default
only when a candidate wins by more than ``MARGIN`` (and ``MARGIN_SECONDS``) and a second timing
of the two confirms it (else the default stays). Winners persist
per machine in ``<cache>/judge/winners.json`` (or ``FUEL_JUDGE_FILE``; written in batches, at
most every ``FLUSH_SECONDS``, and at exit), keyed by op, dtypes, backend, device, bucket and
candidate names, with each candidate's revision: a second process times nothing, and a
changed kernel invalidates only its own entries.

``FUEL_JUDGE``: ``on`` (default: time unseen buckets within ``FUEL_JUDGE_BUDGET`` seconds per
process, 2 by default, and within ``FUEL_JUDGE_SHARE`` of the time since the first judged
launch, 2% by default: a bucket met while that is spent runs the rule and is timed at a later
bind), ``cached`` (use stored winners, time nothing), ``off`` (every kernel's
own rule). A profiled launch that runs much slower than its recorded winner marks the entry
for a re-check. While other processes share the cores (on Linux: their CPU time over the last
second, from ``/proc/stat`` less this process's own, above ``OTHERS_CORES``; elsewhere, or
before a second of history, the load average above 1.5 per core; ``FUEL_JUDGE_MAX_LOAD`` set:
that load average alone) timings would rank the candidates by how they share the cores:
nothing is timed or stored, and the kernel's rule stays. A process
follows a stored winner (the first stored verdict wins), else its own timing, else the rule;
bitwise agreement across processes takes ``off``, or ``cached`` with tuned winners.
``judge_stats()`` counts what it did; ``explain()`` shows the candidates and their times per
node.
"""

from __future__ import annotations

import atexit
import json
import os
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from fuel.dispatch.kernel import BindingEntry, KernelDTypes, Launcher, Variant, prepare_launcher
from fuel.extras import cache_root
from fuel.ir.device import BackendId, Device
from fuel.ir.errors import FuelError
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

MODES = ("off", "cached", "on")
MARGIN = 0.05  # a candidate replaces the default only when faster by more than this fraction
# ... and by more than this many seconds: launches of a few microseconds differ by launch
# noise, and a second thread woken for one costs more between a model's launches than in a
# warm timing loop (MiniLM 1x12: stored switches of 2-5 us launches made it 6% slower).
MARGIN_SECONDS = 3e-6
REPEATS = 7  # timed runs per candidate (after one warm-up), fewer when a run is slow
SETTLED_ROUNDS = 3  # ... or once this many rounds separate the winner from every other
CANDIDATE_SECONDS = 0.05  # about this long per candidate, the rounds of all together
LOSING = 4.0  # a candidate this many times slower than the round's best sits out the rest
# ... or this many times, where the best takes LONG_LAUNCH seconds or more (a launch that long
# varies by a few percent: one round ranks it, and its losers' further runs cost the most)
LONG_LOSING = 1.5
LONG_LAUNCH = 2e-4
# Where a round's best takes LONG_LAUNCH or more, the later rounds time each candidate without
# its untimed run first (a thread team's wake-up is a few microseconds of it) and stop after
# this many rounds once the ranking separates: a MiniLM sweep process spent its whole timing
# allowance, a few hundred ms, mostly on such launches, so fewer buckets were decided per run.
LONG_SETTLED_ROUNDS = 2
REGRESSION = 1.5  # a profiled median this much slower than the winner's triggers a re-check
REGRESSION_SAMPLES = 5
FORMAT = 2  # the winners file's format (2: switches confirmed by a second timing; a file of
# format 1 is timed afresh)
FLUSH_SECONDS = 2.0  # pending verdicts are written to the winners file at most this often
FLOOR_SECONDS = 0.1  # timing allowed from the start (the share adds to it as the process runs)
DEFERRED = "deferred"  # a verdict's source while the allowance is spent: the rule, not kept


def mode() -> str:
    """``FUEL_JUDGE``: off, cached or on (the default)."""
    value = os.environ.get("FUEL_JUDGE", "on").strip().lower() or "on"
    if value not in MODES:
        raise FuelError(f"FUEL_JUDGE={value!r}: expected one of {', '.join(MODES)}")
    return value


def budget() -> float:
    """``FUEL_JUDGE_BUDGET``: seconds this process may spend timing candidates (default 2)."""
    value = os.environ.get("FUEL_JUDGE_BUDGET", "2")
    try:
        return max(0.0, float(value))
    except ValueError:
        raise FuelError(f"FUEL_JUDGE_BUDGET={value!r}: expected a number of seconds") from None


def share() -> float:
    """``FUEL_JUDGE_SHARE``: the fraction of the process's time since its first judged launch
    that timing may take (default 0.02; ``inf`` lifts the limit, as ``fuel tune`` does)."""
    value = os.environ.get("FUEL_JUDGE_SHARE", "0.02")
    try:
        return max(0.0, float(value))
    except ValueError:
        raise FuelError(f"FUEL_JUDGE_SHARE={value!r}: expected a fraction such as 0.05") \
            from None


def bucket_dim(size: int) -> int:
    """A dim's bucket: 0, 1 and 2 exact (a vector, a pair: kernels treat them apart), else
    the next power of two (3 -> 4, 6 -> 8, 12 -> 16, 384 -> 512)."""
    return size if size <= 2 else 1 << (size - 1).bit_length()


def candidate_names(candidates: Sequence[Candidate]) -> str:
    """The candidates' part of a verdict's key: their names sorted, so the shapes of one bucket
    share a verdict even where the kernel's rule puts another candidate first (the rule's
    thread count follows the exact size)."""
    return ",".join(sorted(c.name for c in candidates))


def shape_bucket(layouts: Sequence[Layout]) -> tuple[tuple[int, ...], ...]:
    """The launch's bucket: every operand's dims bucketed (``bucket_dim``)."""
    return tuple([tuple([bucket_dim(d) for d in layout.shape]) for layout in layouts])


@dataclass(frozen=True, slots=True)
class Candidate:
    """One competitor at a launch: a variant of a kernel, or a sibling kernel whole."""

    name: str
    revision: str
    variant: Variant


@dataclass(slots=True)
class Verdict:
    """What the judge decided for one bucket: the winner, the default (the kernel's own
    rule), each candidate's median seconds (empty when not timed) and where it came from
    (``timed``, ``stored``, ``default``: not timed, the rule's choice)."""

    winner: str
    default: str
    seconds: dict[str, float] = field(default_factory=dict)
    source: str = "default"
    observed: list[float] = field(default_factory=list)

    def describe(self) -> str:
        """``judge: c-dot/2t 0.011 ms < openblas 0.020 ms (timed)``, or the default's line."""
        if not self.seconds:
            return f"judge: {self.winner} (the kernel's rule; not timed)"
        ranked = sorted(self.seconds.items(), key=lambda item: item[1])
        times = " < ".join(f"{name} {seconds * 1e3:.3f} ms" for name, seconds in ranked)
        kept = "" if self.winner != self.default else " (default kept)"
        return f"judge: {times} -> {self.winner}{kept} ({self.source})"


class Judge:
    """The process's judge: verdicts by key, the stored winners, the budget spent."""

    def __init__(self, path: Path | None = None) -> None:
        self.lock = threading.RLock()
        self.path = path
        self.verdicts: dict[str, Verdict] = {}
        self.stored: dict[str, dict] | None = None
        self.spent = 0.0
        self.began: float | None = None  # the first judged launch's time (the share's start)
        self.counts = {"timed": 0, "stored": 0, "default": 0, "switched": 0, "rechecks": 0,
                       "stale": 0, "unsaved_busy": 0, "deferred": 0, "unconfirmed": 0}
        self.devices: dict = {}
        self.epoch = 0  # bumped when verdicts are dropped: kernels' remembered choices expire
        # Records not yet written (``flush`` writes them), each with what the file held for
        # its key when it was decided; ``disk``: the file's entries when last read.
        self.pending: dict[str, tuple[dict, dict | None]] = {}
        self.disk: dict[str, dict] = {}
        self.pending_path: Path | None = None  # the file the pending records belong to
        self.written = 0.0  # when pending records were last written
        self.seen: tuple | None = None  # the file's (mtime, size) when read or written last
        atexit.register(self.flush)

    # -- the store ---------------------------------------------------------------------------
    def _file(self) -> Path:
        if self.path is not None:
            return self.path
        configured = os.environ.get("FUEL_JUDGE_FILE")
        return Path(configured) if configured else cache_root() / "judge" / "winners.json"

    def _state(self, path: Path) -> tuple | None:
        try:
            status = path.stat()
        except OSError:
            return None
        return status.st_mtime_ns, status.st_size

    def _read(self, path: Path) -> dict[str, dict]:
        """The file's entries (none where it is missing or unreadable), noting its state and
        what it held (``disk``)."""
        self.seen = self._state(path)
        try:
            data = json.loads(path.read_text())
            entries = data.get("entries", {}) if data.get("format") == FORMAT else {}
        except (OSError, ValueError, AttributeError):
            entries = {}
        entries = entries if isinstance(entries, dict) else {}
        self.disk = dict(entries)
        return entries

    def _load(self) -> dict[str, dict]:
        if self.stored is None:
            self.stored = self._read(self._file())
            self.stored.update({key: record for key, (record, _) in self.pending.items()})
        return self.stored

    def _refresh(self) -> dict[str, dict]:
        """The stored entries, re-read only where another process changed the file since
        this one read or wrote it last (a stat, not a parse, per timed bucket)."""
        if self.stored is not None and self._state(self._file()) != self.seen:
            self.stored = None
        return self._load()

    def _save(self, key: str, record: dict) -> None:
        """Keep ``record`` as stored and write it with the other pending records at most
        every ``FLUSH_SECONDS`` (and at exit, and at ``flush``): one file write per batch,
        not per timed bucket."""
        path = self._file()
        if self.pending and path != self.pending_path:  # the file changed (FUEL_JUDGE_FILE)
            self.flush()
        self.pending_path = path
        self._load()[key] = record
        base = self.pending[key][1] if key in self.pending else self.disk.get(key)
        self.pending[key] = (record, base)  # base: what the file held when this was decided
        if time.perf_counter() - self.written >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Merge the pending records into the winners file (re-read first: other processes
        write too, and the first stored verdict of a bucket stays); a cache folder that
        cannot be written keeps them in memory only."""
        with self.lock:
            if not self.pending:
                return
            path = self.pending_path or self._file()
            entries = self._read(path)
            for key, (record, base) in self.pending.items():
                found = entries.get(key)  # another process's valid verdict since then stays
                if found is None or found == base or found.get("recheck") or \
                        found.get("revisions") != record.get("revisions"):
                    entries[key] = record
            self.pending.clear()
            self.written = time.perf_counter()
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
                temporary.write_text(json.dumps({"format": FORMAT, "entries": entries},
                                                separators=(",", ":"), sort_keys=True))
                os.replace(temporary, path)
                self.seen, self.disk = self._state(path), dict(entries)
            except OSError:
                pass
            # The current file's entries (another file's batch: read the current one anew).
            self.stored = entries if path == self._file() else None

    # -- deciding ------------------------------------------------------------------------------
    def device_name(self, backend: BackendId, index: int) -> str:
        """What the winners are measured on: the backend's description of the device (the
        CPU's model name), with the thread count the CPU kernels use."""
        name = self.devices.get((backend, index))
        if name is None:
            from fuel.backends import find_backend

            device = Device(backend, index)
            try:
                name = find_backend(backend).describe_device(device)
            except Exception:  # a description is a label; the device itself still runs
                name = str(device)
            if backend is BackendId.CPU:
                name = f"{_processor() or name} threads={_threads()}"
            self.devices[(backend, index)] = name
        return name

    def choose(self, head: str, candidates: Sequence[Candidate], inputs: Sequence,
               outputs: Sequence, layouts: Sequence[Layout], params: object,
               ready: bool = True) -> Candidate | None:
        """The candidate to dispatch for this launch (timing the candidates first when the
        bucket is unseen, the mode is ``on`` and budget is left). ``ready``: the operands hold
        their values (a launch now), else (a bind ahead of the launches) None where deciding
        would need a timing."""
        return self.pick(head, candidates, inputs, outputs, layouts, params, ready)[0]

    def pick(self, head: str, candidates: Sequence[Candidate], inputs: Sequence,
             outputs: Sequence, layouts: Sequence[Layout], params: object,
             ready: bool = True) -> tuple[Candidate | None, bool]:
        """``choose``'s candidate, and whether the bucket is decided: False while its timing
        waits for the allowance (the rule runs it meanwhile, and a later bind asks again)."""
        key = f"{head}|{shape_bucket(layouts)}|{candidate_names(candidates)}"
        verdict = self.verdicts.get(key)
        if verdict is None:
            with self.lock:
                verdict = self.verdicts.get(key)
                if verdict is None:
                    verdict = self._decide(key, candidates, inputs, outputs, layouts, params,
                                           ready)
                    if verdict is None:
                        return None, False
                    if verdict.source != DEFERRED:  # a deferred bucket is timed once allowed
                        self.verdicts[key] = verdict
        decided = verdict.source != DEFERRED
        for candidate in candidates:
            if candidate.name == verdict.winner:
                return candidate, decided
        return candidates[0], decided

    def _decide(self, key: str, candidates: Sequence[Candidate], inputs: Sequence,
                outputs: Sequence, layouts: Sequence[Layout], params: object,
                ready: bool = True) -> Verdict | None:
        default = candidates[0].name
        current = mode()
        if current == "off":
            self.counts["default"] += 1
            return Verdict(default, default)
        revisions = {c.name: c.revision for c in candidates}
        record = self._load().get(key)
        if record is not None:
            if record.get("revisions") == revisions and not record.get("recheck"):
                self.counts["stored"] += 1
                return Verdict(record["winner"], default, dict(record.get("seconds", {})),
                               "stored")
        timing = not (current == "cached" or _aliased(inputs, outputs))
        if timing and self.spent >= self.allowance():  # the rule runs it until time is allowed
            self.counts["deferred"] += 1
            return Verdict(default, default, {}, DEFERRED)
        if timing and not ready:  # the operands are not computed yet: time at first launch
            return None
        if record is not None and record.get("revisions") != revisions:
            self.counts["stale"] += 1
        if not timing:
            self.counts["default"] += 1
            return Verdict(default, default)
        if _busy():  # timings of a machine busier than its cores would rank nothing (they are
            self.counts["unsaved_busy"] += 1  # not stored): the rule stays, untimed, as in
            return Verdict(default, default, {}, "busy machine: rule kept")  # other processes
        start = time.perf_counter()
        seconds = _time_candidates(candidates, inputs, outputs, layouts, params,
                                   self.allowance() - self.spent)
        winner = _winner(seconds, default)
        # A switch holds only where a second timing of the two agrees: one run of the default
        # slowed by another tenant of the host (a long launch's round can rank on one run)
        # once stored a one-thread winner that doubled resnet18's layer3 convolutions.
        if winner != default and default in seconds:
            pair = [c for c in candidates if c.name in (default, winner)]
            spent = self.spent + time.perf_counter() - start
            again = _time_candidates(pair, inputs, outputs, layouts, params,
                                     self.allowance() - spent)
            seconds = {**seconds, **again}
            if _winner(again, default) != winner:
                self.counts["unconfirmed"] += 1
                winner = default
        self.spent += time.perf_counter() - start
        self.counts["timed"] += 1
        if winner != default:
            self.counts["switched"] += 1
        if _busy():  # it became busy while timing: the timings rank nothing, the rule stays
            self.counts["unsaved_busy"] += 1
            return Verdict(default, default, seconds, "timed on a busy machine: rule kept")
        record = self._refresh().get(key)  # another process may have stored it meanwhile
        if record is not None and record.get("revisions") == revisions and \
                not record.get("recheck"):  # the first stored verdict wins: one machine's
            return Verdict(record["winner"], default,  # processes dispatch alike
                           dict(record.get("seconds", {})), "stored")
        self._save(key, {"winner": winner, "default": default, "seconds": seconds,
                         "revisions": revisions, "timed": time.strftime("%Y-%m-%d %H:%M:%S")})
        return Verdict(winner, default, seconds, "timed")

    def allowance(self) -> float:
        """Seconds of timing allowed by now: ``FLOOR_SECONDS`` plus ``share()`` of the time
        since the first judged launch (less the timing itself), at most ``budget()``; so a
        short run pays at most about that share for tuning, and a long one (a server) still
        gets its whole budget."""
        now = time.perf_counter()
        if self.began is None:
            self.began = now
        fraction = share()
        if fraction == float("inf"):
            return budget()
        return min(budget(), FLOOR_SECONDS + fraction * max(0.0, now - self.began - self.spent))

    def observe(self, key_prefix: str, layouts: Sequence[Layout], candidates_names: str,
                seconds: float) -> None:
        """A profiled launch of a judged kernel took ``seconds``: after REGRESSION_SAMPLES
        launches whose median is REGRESSION times the winner's timed median (and 5 us more),
        the bucket is re-checked at its next bind."""
        key = f"{key_prefix}|{shape_bucket(layouts)}|{candidates_names}"
        verdict = self.verdicts.get(key)
        if verdict is None or verdict.winner not in verdict.seconds:
            return
        verdict.observed.append(seconds)
        if len(verdict.observed) < REGRESSION_SAMPLES:
            return
        observed = statistics.median(verdict.observed)
        verdict.observed.clear()
        if observed > verdict.seconds[verdict.winner] * REGRESSION + 5e-6:
            with self.lock:
                self.verdicts.pop(key, None)
                self.epoch += 1
                record = self._load().get(key)
                if record is not None:
                    self._save(key, dict(record, recheck=True))
                self.counts["rechecks"] += 1

    def describe(self, head: str, bucket: tuple) -> list[str]:
        """Each verdict (in this process, else stored) for ``bucket`` of the key ``head``."""
        prefix = f"{head}|{bucket}|"
        found = [v.describe() for key, v in self.verdicts.items() if key.startswith(prefix)]
        if not found and mode() != "off":
            for key, record in self._load().items():
                if key.startswith(prefix):
                    verdict = Verdict(record.get("winner", "?"), record.get("default", "?"),
                                      dict(record.get("seconds", {})), "stored")
                    found.append(verdict.describe())
        return found

    def stats(self) -> dict:
        with self.lock:
            return {"mode": mode(), "budget_seconds": budget(), "share": share(),
                    "spent_seconds": round(self.spent, 4), **self.counts,
                    "verdicts": len(self.verdicts), "stored_entries": len(self._load()),
                    "path": str(self._file())}

    def forget(self) -> None:
        """Drop this process's verdicts and counts (the stored winners stay on disk)."""
        with self.lock:
            self.flush()
            self.verdicts.clear()
            self.epoch += 1
            self.stored = None
            self.spent = 0.0
            self.began = None
            for name in self.counts:
                self.counts[name] = 0


def _busy() -> bool:
    """Whether other work shares the cores: timings taken then rank the candidates by how
    they share the cores with others (a two-thread kernel waits on its descheduled half and
    loses to its one-thread form), so they are not stored for other processes.
    ``FUEL_JUDGE_MAX_LOAD`` set: the 1-minute load average above it. Else the other
    processes' CPU time over the last second (``_OTHERS``) above ``OTHERS_CORES``, and where
    that cannot be read yet, the load average above 1.5 per core (a 2-core machine running
    another busy process reads about 2-3, under that bound, which is why it comes second)."""
    value = os.environ.get("FUEL_JUDGE_MAX_LOAD")
    if not value:
        others = _OTHERS.cores()
        if others is not None:  # cores this process's threads do not use are the others'
            spare = max(0, (os.cpu_count() or 1) - _threads())
            return others > OTHERS_CORES + spare
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - no load average here
        return False
    try:
        limit = float(value) if value else 1.5 * _threads()
    except ValueError:
        raise FuelError(f"FUEL_JUDGE_MAX_LOAD={value!r}: expected a number") from None
    return load > limit


class OtherWork:
    """Other processes' CPU use, in cores, over the last ``CONTENTION_WINDOW`` seconds or
    more: the machine's busy time (``/proc/stat``: user, nice, system, irq, softirq and steal,
    the hypervisor's share) less this process's own CPU time, per second of wall time. The
    machine's figure counts clock ticks, so a window shorter than ``CONTENTION_MINIMUM``
    seconds tells nothing (None). Samples are taken when asked (two small reads)."""

    def __init__(self, path: str = "/proc/stat", clock=time.monotonic,
                 own=time.process_time) -> None:
        self.path, self.clock, self.own = path, clock, own
        self.samples: list[tuple[float, float, float]] = []
        try:
            self.tick = 1.0 / os.sysconf("SC_CLK_TCK")
        except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
            self.tick = 0.01
        self.sample()

    def sample(self) -> tuple[float, float, float] | None:
        """(wall seconds, the machine's busy CPU seconds, this process's CPU seconds)."""
        try:
            with open(self.path, "rb") as stat:
                fields = stat.readline().split()
            busy = sum(int(x) for x in fields[1:4]) + sum(int(x) for x in fields[6:9])
        except (OSError, ValueError, IndexError):
            return None
        found = (self.clock(), busy * self.tick, self.own())
        self.samples.append(found)
        return found

    def cores(self) -> float | None:
        now = self.sample()
        if now is None:
            return None
        samples = self.samples
        # keep the newest sample at least a window old (the reference) and those after it
        while len(samples) > 2 and now[0] - samples[1][0] >= CONTENTION_WINDOW:
            samples.pop(0)
        wall0, busy0, own0 = samples[0]
        span = now[0] - wall0
        if span < CONTENTION_MINIMUM:
            return None
        return max(0.0, (now[1] - busy0) - (now[2] - own0)) / span


# Other processes' average CPU use (cores) above which the judge trusts no timing: a second
# busy process on a 2-core machine reads about 1; a shell, a file indexer or the kernel's own
# threads stay well under it.
OTHERS_CORES = 0.3
CONTENTION_WINDOW = 1.0
CONTENTION_MINIMUM = 0.5
_OTHERS = OtherWork()


def _processor() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), or "" where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor()


def _threads() -> int:
    """The thread count the CPU's C kernels use (``FUEL_THREADS`` or the cores)."""
    from fuel.backends.cpu.quantized import thread_count

    return thread_count()


def _aliased(inputs: Sequence, outputs: Sequence) -> bool:
    """Whether an output shares memory with an input (timing would overwrite an operand)."""
    return any(o is i or getattr(o, "buffer", None) is getattr(i, "buffer", 0)
               for o in outputs for i in inputs)


def _time_candidates(candidates: Sequence[Candidate], inputs: Sequence, outputs: Sequence,
                     layouts: Sequence[Layout], params: object,
                     allowed: float = float("inf")) -> dict[str, float]:
    """Median seconds per candidate on these operands. Each candidate runs once to warm up
    (a first launch may compile: never judged), then the candidates take turns, one run each
    per round, the order rotating, for up to REPEATS rounds within CANDIDATE_SECONDS per
    candidate: what one leaves behind (another library's threads still spinning, a cache it
    filled) falls on all of them alike, as it does between the launches of a model. Each
    timed run follows an untimed one of the same candidate, so a threaded candidate is timed
    with its threads awake, as in a model's back-to-back launches (timed cold, a thread
    team's wake-up made every two-thread form lose to its one-thread form); without it where
    every warm-up, or the last round's best, took LONG_LAUNCH or more. A
    candidate far behind the best after a round (LOSING; LONG_LOSING where the best takes
    LONG_LAUNCH or more) sits out the rest, and the rounds end when one candidate is left;
    the rounds after the second stop once ``allowed``
    seconds (what the judge's allowance has left) have passed, and the rounds after
    SETTLED_ROUNDS (LONG_SETTLED_ROUNDS for long launches) once one candidate's slowest run
    beats every other's fastest by MARGIN (``_separated``) or the default is within half
    the margin of the best (``_tied_with_default``); one that fails to prepare or run
    drops out."""
    storage = outputs[0] if outputs else None
    synchronize = None
    if storage is not None and storage.device.backend is not BackendId.CPU:
        backend, device = storage.backend, storage.device
        synchronize = lambda: backend.synchronize(device)  # noqa: E731

    def run(launcher) -> float:
        start = time.perf_counter()
        launcher()
        if synchronize is not None:
            synchronize()
        return time.perf_counter() - start

    launchers: dict[str, Launcher] = {}
    warm: list[float] = []
    for candidate in candidates:
        try:
            launcher = candidate.variant.prepare(inputs, outputs, layouts, params)
            warm.append(run(launcher))
        except Exception:  # a candidate that cannot run this launch loses it
            continue
        launchers[candidate.name] = launcher
    samples: dict[str, list[float]] = {name: [] for name in launchers}
    active = list(launchers)
    limit = min(CANDIDATE_SECONDS * max(1, len(active)), max(0.0, allowed))
    begin = time.perf_counter()
    # the last round's best (before the first round: the fastest warm-up) took LONG_LAUNCH or
    # more: the runs need no untimed run before them (a warm-up that compiled only looks long)
    long = bool(warm) and min(warm) >= LONG_LAUNCH
    for round_ in range(REPEATS):
        if not active:
            break
        shift = round_ % len(active)
        for name in active[shift:] + active[:shift]:
            try:
                if not long:  # untimed: its threads awake, as between a model's launches
                    launchers[name]()
                samples[name].append(run(launchers[name]))
            except Exception:
                samples[name] = []
        active = [name for name in active if samples[name]]
        if active:
            best = min(samples[name][-1] for name in active)
            long = best >= LONG_LAUNCH
            losing = LONG_LOSING if long else LOSING
            active = [name for name in active
                      if not (samples[name][-1] > losing * best and samples[name][-1] > 1e-4)]
        if len(active) < 2 or (time.perf_counter() - begin > limit and round_ >= 1):
            break  # the rest ran far behind: more rounds would time the winner alone
        settled = LONG_SETTLED_ROUNDS if long else SETTLED_ROUNDS
        if round_ + 1 >= settled and (_separated([samples[name] for name in active]) or
                                      _tied_with_default(samples, active, candidates[0].name)):
            break  # more rounds would only confirm the ranking
    return {name: statistics.median(found) for name, found in samples.items() if found}


def _winner(seconds: dict[str, float], default: str) -> str:
    """The fastest candidate where it beats the default by MARGIN and MARGIN_SECONDS (or the
    default was not timed), else the default."""
    if not seconds:
        return default
    best = min(seconds, key=seconds.get)
    if default not in seconds or seconds[best] < seconds[default] * (1 - MARGIN) - MARGIN_SECONDS:
        return best
    return default


def _tied_with_default(samples: dict[str, list[float]], active: Sequence[str],
                       default: str) -> bool:
    """Whether the default, still in the race, is within half the switching margin of the
    best median: no candidate is on course to replace it (``Judge._decide`` switches only
    past the whole margin), so candidates within each other's noise stop at the settled
    round instead of taking every round."""
    if default not in active:
        return False
    medians = [statistics.median(samples[name]) for name in active]
    own = statistics.median(samples[default])
    return own * (1 - MARGIN / 2) - MARGIN_SECONDS / 2 <= min(medians)


def _separated(samples: Sequence[list[float]]) -> bool:
    """Whether one candidate's slowest run beats every other's fastest by the switching
    margin: the ranking, its winner's margin included, no longer depends on the noise."""
    if len(samples) < 2:
        return True
    best = min(samples, key=statistics.median)
    slowest = max(best)
    return all(min(other) * (1 - MARGIN) > slowest for other in samples if other is not best)


JUDGE = Judge()


def winners_path() -> Path:
    """The winners file this process reads and writes (``FUEL_JUDGE_FILE`` or the cache
    folder's ``judge/winners.json``); what ``fuel tune`` records beside it lives in its folder."""
    return JUDGE._file()


def judge_stats() -> dict:
    """What the judge did in this process: buckets timed, taken from the stored winners or
    left to the kernels' rules, how many switched away from the rule, re-checks, stale
    entries, seconds spent against the budget, the mode and the winners file."""
    return JUDGE.stats()


def key_head(op: OpKind | str, dtypes: KernelDTypes, backend: BackendId, device: str) -> str:
    """The part of a verdict's key before the bucket."""
    name = op if isinstance(op, str) else op.value
    return f"{name}|{','.join(d.name for d in dtypes)}|{backend.value}|{device}"


def judged_generated(compiled_entry: BindingEntry, dtypes: KernelDTypes, backend: BackendId):
    """A generated kernel's JudgedKernel when it says its variants may compete (``competes``:
    a row kernel's serial and parallel rows), keyed by its source's revision; else None."""
    if not getattr(compiled_entry.kernel, "competes", False):
        return None
    return JudgedKernel(OpKind.FUSED, dtypes, backend, [compiled_entry],
                        f"fused#{compiled_entry.kernel_revision_hash:016x}")


class JudgedKernel:
    """A kernel with competing candidates, behind the kernel contract: ``prepare`` asks the
    judge which candidate runs this launch. Its candidates are the first entry's variants
    (when it offers any; the first variant is its rule's choice) and every other sibling at
    the key with the same caps, whole, that accepts the launch (a sibling kernel may define
    ``accepts(layouts, params) -> bool``; the first entry accepts every launch)."""

    def __init__(self, op: OpKind, dtypes: KernelDTypes, backend: BackendId,
                 entries: Sequence[BindingEntry], label: str | None = None) -> None:
        self.op, self.dtypes, self.backend = op, dtypes, backend
        self.entries = tuple(entries)
        self.label = label or op.value  # the verdicts' op field (a generated kernel's: its hash)
        self.__name__ = self.__qualname__ = getattr(entries[0].kernel, "__name__", op.value)
        # (layouts, params, constant operands) -> (judge epoch, the chosen candidate): a bound
        # launch of a seen shape costs one lookup; a re-check (a new epoch) decides again.
        self.chosen: dict = {}
        self.wholes: dict = {}  # (entry position, name) -> its whole Candidate (_whole)
        # (layouts, params, device index, constant operands) -> (key head, candidate names),
        # or None for a launch with one candidate: what ``observe`` files a profiled time under
        self.observing: dict = {}

    def for_shape(self, shape: tuple[int, ...], load_strides: list) -> JudgedKernel | None:
        """A generated kernel's contest at another shape: its kernel's twin for ``shape``
        (the same source and revision, so the same verdicts), judged alike; None where the
        twin cannot serve."""
        reshape = getattr(self.entries[0].kernel, "for_shape", None)
        twin = reshape(shape, load_strides) if len(self.entries) == 1 and reshape else None
        if twin is None:
            return None
        entry = replace(self.entries[0], kernel=twin)
        return JudgedKernel(self.op, self.dtypes, self.backend, [entry], self.label)

    @property
    def loop(self):
        """The first entry's loop (a generated kernel's LoopKernel), or None."""
        return getattr(self.entries[0].kernel, "loop", None)

    def candidates(self, layouts: Sequence[Layout], params: object, index: int = 0,
                   constants: tuple[bool, ...] = ()) -> tuple[Candidate, ...]:
        """The launch's candidates, the rule's first; ``constants`` (per operand, whether its
        storage is constant: a model's weight) reaches a kernel whose variants depend on it
        (``variants_by_constants``: one that packs a constant weight once)."""
        first = self.entries[0]
        found: list[Candidate] = []
        offer = getattr(first.kernel, "variants", None)
        device = Device(self.backend, index)
        if offer is None:
            variants = ()
        elif getattr(first.kernel, "variants_by_constants", False):
            variants = offer(layouts, params, device, constants)
        else:
            variants = offer(layouts, params, device)
        for variant in variants:
            found.append(Candidate(variant.name, f"{first.kernel_revision_hash:016x}", variant))
        if not found:
            found.append(self._whole(0, _sibling_name(first)))
        names = {c.name for c in found}
        for position, entry in enumerate(self.entries[1:], 1):
            accepts = getattr(entry.kernel, "accepts", None)
            if accepts is not None and not accepts(layouts, params):
                continue  # a sibling for some launches only (a form of the convolution)
            name = _sibling_name(entry)
            while name in names:
                name += "'"
            names.add(name)
            found.append(self._whole(position, name))
        return tuple(found)

    def _whole(self, position: int, name: str) -> Candidate:
        """The ``position``-th entry as one candidate named ``name`` (made once: a new shape
        asks for the candidates of every launch)."""
        key = (position, name)
        known = self.wholes.get(key)
        if known is None:
            known = self.wholes[key] = _whole(self.entries[position], name)
        return known

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: object, ready: bool = False) -> Launcher:
        """The chosen candidate's launcher. ``ready``: the operands hold their values (a
        launch follows at once); a bind ahead of its launches (a bound plan, a fuel.jit
        capture) whose bucket needs a timing gets a launcher that times at its first call,
        on the operands then computed."""
        constants = _constants(inputs)
        try:
            key = (tuple(layouts), params, constants)
            epoch, candidate = self.chosen.get(key, (-1, None))
        except TypeError:  # unhashable params: decide every time
            key, epoch, candidate = None, -1, None
        if candidate is None or epoch != JUDGE.epoch:
            index = _index(outputs, inputs)
            candidates = self.candidates(layouts, params, index, constants)
            candidate, decided = candidates[0], True
            if len(candidates) > 1:
                candidate, decided = JUDGE.pick(self._head(index), candidates, inputs, outputs,
                                                layouts, params, ready)
                if candidate is None:
                    return _TimedAtFirstLaunch(self, inputs, outputs, layouts, params)
            if key is not None and decided:  # a deferred bucket: the next bind asks again
                _remember(self.chosen, key, (JUDGE.epoch, candidate))
        return candidate.variant.prepare(inputs, outputs, layouts, params)

    def _head(self, index: int) -> str:
        """The head of this kernel's verdict keys on device ``index``."""
        return key_head(self.label, self.dtypes, self.backend,
                        JUDGE.device_name(self.backend, index))

    def observe(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: object, seconds: float) -> None:
        """A profiled launch's time (see ``Judge.observe``). The verdict's key is worked out
        once per (layouts, params, device, constant operands): listing a convolution's
        candidates again after every profiled launch cost about 85 us of Python between the
        launches being timed (execute_compiled's measure)."""
        index, constants = _index(outputs, inputs), _constants(inputs)
        try:
            key = (tuple(layouts), params, index, constants)
            known = self.observing.get(key, False)
        except TypeError:  # unhashable params: work it out every time
            key, known = None, False
        if known is False:
            candidates = self.candidates(layouts, params, index, constants)
            known = None if len(candidates) < 2 else (self._head(index),
                                                      candidate_names(candidates))
            if key is not None:
                _remember(self.observing, key, known)
        if known is not None:
            JUDGE.observe(known[0], layouts, known[1], seconds)

    def __call__(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                 params: object) -> None:
        self.prepare(inputs, outputs, layouts, params, ready=True)()


class _TimedAtFirstLaunch:
    """A bound launch whose bucket the judge has not decided: its first call times the
    candidates on the operands as they are then (computed), later calls run the winner."""

    def __init__(self, kernel: JudgedKernel, inputs, outputs, layouts, params) -> None:
        self.kernel, self.operands = kernel, (inputs, outputs, layouts, params)
        self.launcher: Launcher | None = None

    def __call__(self) -> None:
        launcher = self.launcher
        if launcher is None:
            launcher = self.launcher = self.kernel.prepare(*self.operands, ready=True)
        launcher()

    @property
    def kernel_source(self) -> str | None:
        return getattr(self.launcher, "kernel_source", None)

    @property
    def settled(self) -> Launcher | None:
        """The winner's launcher once the first call decided (a bound plan then calls it
        directly), else None."""
        return self.launcher


def _index(outputs: Sequence, inputs: Sequence) -> int:
    """The device index the launch runs on (its first output's, else its first input's)."""
    storage = outputs[0] if outputs else inputs[0]
    return storage.device.index


def _remember(memo: dict, key: object, value: object) -> None:
    """``memo[key] = value``, the memo emptied first once it holds 4096 entries (a process
    fed ever new shapes keeps it bounded)."""
    if len(memo) > 4096:
        memo.clear()
    memo[key] = value


def _constants(inputs: Sequence) -> tuple[bool, ...]:
    """Per input, whether its storage is constant (a model's weight)."""
    return tuple([getattr(storage, "constant", False) for storage in inputs])


def _sibling_name(entry: BindingEntry) -> str:
    """A whole sibling's candidate name: its source tag and the kernel's name where it has
    one (``c:conv_gemm_float32``), else the tag alone."""
    name = getattr(entry.kernel, "__name__", None)
    return f"{entry.kernel_source}:{name}" if isinstance(name, str) else entry.kernel_source


def _whole(entry: BindingEntry, name: str) -> Candidate:
    kernel = entry.kernel
    return Candidate(name, f"{entry.kernel_revision_hash:016x}", Variant(
        name, lambda inputs, outputs, layouts, params: prepare_launcher(
            kernel, inputs, outputs, layouts, params)))


def judged(op: OpKind, dtypes: KernelDTypes, backend: BackendId,
           siblings: Sequence[BindingEntry]):
    """The kernel a plan binds for this key: a JudgedKernel when candidates compete (the
    first eligible entry offers variants, or another sibling has its caps), else None."""
    eligible = [e for e in siblings if not e.caps.requires_broadcast]
    if not eligible:
        return None
    first = eligible[0]
    # A first kernel whose variants already do what its siblings do says so (covers_siblings).
    same = [first] if getattr(first.kernel, "covers_siblings", False) else [
        e for e in eligible if e.caps == first.caps]
    if len(same) < 2 and getattr(first.kernel, "variants", None) is None:
        return None
    return JudgedKernel(op, dtypes, backend, same)
