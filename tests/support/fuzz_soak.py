"""The long fuzz soak: the fuzzer's three properties over many random cases, in parallel.

    .venv/bin/python -m tests.support.fuzz_soak --cases 1000000 [--property event|cut|damaged|all]
                                               [--jobs N] [--seed S]

The cases come from the same generators as the hypothesis tests (tests/support/fuzz_cases.py), drawn
from ``random.Random(f"{S}:{property}:{i}")`` instead of hypothesis, which is an order of magnitude
cheaper per case. Case ``i`` is reproduced with ``--seed S --only i``; a failure prints the case tuple
to pin in test_fuzz_decoder.py. Each case runs under the same guards (5 s hang watchdog, 64 MB heap
limit); a case over the 2 s deadline is run again and fails only if it is slow again (a loaded
machine can stall one run). The report counts the outcomes (how many mutated events decoded and which
errors the rest raised), the slowest case and the workers' peak RSS. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from tests.support.fuzz_cases import (
    ALL_FILES,
    DEADLINE_MS,
    SMALL_FILES,
    RandomSource,
    cut_case,
    damaged_case,
    event_case,
    run_cut_case,
    run_damaged_case,
    run_event_case,
)

PROPERTIES = ("event", "cut", "damaged")
CHUNK = 2000
TASKS_PER_WORKER = 10  # chunks
MAX_FAILURES = 5


def make_case(prop: str, seed: int, i: int) -> tuple:
    """Case ``i`` of property ``prop`` in a run seeded ``seed``."""
    source = RandomSource(f"{seed}:{prop}:{i}")
    if prop == "event":
        return event_case(source)
    if prop == "cut":
        return cut_case(source, ALL_FILES)
    return damaged_case(source, SMALL_FILES)


def run_case(prop: str, case: tuple) -> str:
    """Run one case; returns its outcome label. Raises AssertionError (or a guard's error) on failure."""
    if prop == "event":
        return run_event_case(*case)[0]
    if prop == "cut":
        return run_cut_case(*case)
    return run_damaged_case(*case)


@dataclass
class SoakResult:
    """What a soak (or one chunk of it) found.

    Fields: ``prop``; ``seed``; ``cases`` run; ``outcomes`` (label -> count); ``failures``
    (``(i, case, error)`` triples); ``slowest`` (seconds, i); ``seconds`` of wall time.
    """

    prop: str
    seed: int
    cases: int = 0
    outcomes: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)
    slowest: tuple[float, int] = (0.0, -1)
    seconds: float = 0.0

    def merge(self, other: SoakResult) -> None:
        self.cases += other.cases
        self.outcomes.update(other.outcomes)
        self.failures.extend(other.failures)
        self.slowest = max(self.slowest, other.slowest)

    def report(self) -> str:
        """A few lines for a terminal or RELIABILITY.md."""
        top = ", ".join(f"{label} {n}" for label, n in self.outcomes.most_common())
        lines = [f"{self.prop}: {self.cases} cases (seed {self.seed}) in {self.seconds:.0f} s, "
                 f"{len(self.failures)} failures; slowest case {self.slowest[0] * 1000:.0f} ms (#{self.slowest[1]})",
                 f"  outcomes: {top}"]
        lines += [f"  FAILED case #{i}: {case!r}\n    {error}" for i, case, error in self.failures]
        return "\n".join(lines)


def _timed(prop: str, case: tuple) -> float:
    started = time.perf_counter()
    run_case(prop, case)
    return time.perf_counter() - started


def soak_range(prop: str, seed: int, start: int, stop: int) -> SoakResult:
    """Run cases ``start``..``stop - 1``; stops early after MAX_FAILURES failures."""
    result = SoakResult(prop, seed)
    for i in range(start, stop):
        case = make_case(prop, seed, i)
        started = time.perf_counter()
        try:
            result.outcomes[run_case(prop, case)] += 1
            took = time.perf_counter() - started
            if took > DEADLINE_MS / 1000 and _timed(prop, case) > DEADLINE_MS / 1000:
                raise AssertionError(f"took {took:.1f} s twice (deadline {DEADLINE_MS} ms)")
        except Exception as exc:  # noqa: BLE001 - every escape is a finding, reported with its case
            result.failures.append((i, case, f"{type(exc).__name__}: {exc}"))
            if len(result.failures) >= MAX_FAILURES:
                break
            continue
        finally:
            result.cases += 1
        result.slowest = max(result.slowest, (took, i))
    return result


def soak(prop: str, cases: int, seed: int, jobs: int, progress=None) -> SoakResult:
    """Run ``cases`` cases of ``prop`` on ``jobs`` processes; ``progress(result)`` is called per chunk."""
    total = SoakResult(prop, seed)
    started = time.monotonic()
    chunks = [(start, min(start + CHUNK, cases)) for start in range(0, cases, CHUNK)]
    group = jobs * TASKS_PER_WORKER
    for first in range(0, len(chunks), group):
        # Fresh workers for every group of chunks: tracemalloc, started and stopped around each case
        # (fuzz_cases.guarded), leaves ~3 KB behind each time; tracing whole ranges instead would make
        # every case ~3x slower.
        with ProcessPoolExecutor(jobs) as pool:
            futures = [pool.submit(soak_range, prop, seed, a, b) for a, b in chunks[first:first + group]]
            for future in futures:
                total.merge(future.result())
                total.seconds = time.monotonic() - started
                if progress:
                    progress(total)
                if len(total.failures) >= MAX_FAILURES:
                    for f in futures:
                        f.cancel()
                    return total
    return total


def _progress_printer(cases: int):
    """A progress callback for soak(): a line at every tenth of ``cases``, and each failure as it comes."""
    step = max(cases // 10, CHUNK)
    next_mark, shown = [step], [0]

    def progress(r: SoakResult) -> None:
        for i, case, error in r.failures[shown[0]:]:
            print(f"  FAILED {r.prop} case #{i} (seed {r.seed}): {case!r}\n    {error}", flush=True)
        shown[0] = len(r.failures)
        if r.cases >= next_mark[0]:
            print(f"  {r.prop}: {r.cases}/{cases} cases, {len(r.failures)} failures, {r.seconds:.0f} s", flush=True)
            next_mark[0] += step

    return progress


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.fuzz_soak", description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=1_000_000, help="cases per property (default 1000000)")
    parser.add_argument("--property", choices=PROPERTIES + ("all",), default="all")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=None, help="default: from the clock (printed)")
    parser.add_argument("--only", type=int, default=None, help="run just case i (reproduce a failure)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    props = PROPERTIES if args.property == "all" else (args.property,)
    if not ALL_FILES:
        print("the binlog corpus (../shared/binlogs) is missing", file=sys.stderr)
        return 2
    failed = False
    for prop in props:
        if args.only is not None:
            result = soak_range(prop, seed, args.only, args.only + 1)
        else:
            result = soak(prop, args.cases, seed, args.jobs, _progress_printer(args.cases))
        print(result.report(), flush=True)
        failed = failed or bool(result.failures)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS of a worker: {peak:.0f} MiB")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
