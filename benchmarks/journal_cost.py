"""What the run journal costs (modelci.journal; figures in docs/faults.md, "A run killed outright").

    .venv/bin/python benchmarks/journal_cost.py

Every fresh result of a run is pickled into the journal with its output arrays, flushed to the disk (fsync) and
renamed into place as it arrives, so that a run killed with SIGKILL loses nothing that finished. This measures
that cost on the cache folder's disk: once on the six results of a real `zoo:numpy` run (target `current`), set
against that run's own wall time, and once per result on synthetic results holding 1, 10 and 100 MB of outputs
(what a large model's logits may weigh). Each figure is the median of 5 journals written one after the other.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from modelci import config as config_module
from modelci import journal, workflow
from modelci.records import Result
from modelci.report.console import Progress

REPEATS = 5


def journal_seconds(results: list[Result], run: dict) -> list[float]:
    """Seconds to journal `results`, once per repeat, each time into a new journal."""
    times = []
    for _ in range(REPEATS):
        with tempfile.TemporaryDirectory(dir=Path.home()) as cache:  # the home disk, as cache_dir is by default
            kept = journal.Journal(cache, "benchmark-history", run)
            start = time.perf_counter()
            for result in results:
                kept.add(result)
            times.append(time.perf_counter() - start)
            kept.close()
    return times


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        cfg = config_module.load(cli={"db": str(Path(folder) / "h.db")}, cwd=Path(folder))
        outcome = workflow.run(cfg, "current", ["zoo:numpy"], progress=Progress(quiet=True))
    run = dict(target=outcome.target, environment=outcome.environment, runner="benchmark", suites=["zoo:numpy"],
               selection="", command="", started_at=None, purpose="", parent_run_id=None)
    wall = sum(outcome.timings.values())
    times = journal_seconds(outcome.results, run)
    outputs = sum(getattr(a, "nbytes", 0) for r in outcome.results for a in r.outputs.values())
    print(f"zoo:numpy: {len(outcome.results)} results, {outputs / 1e6:.2f} MB of outputs; journal median "
          f"{statistics.median(times) * 1e3:.1f} ms per run ({', '.join(f'{t * 1e3:.1f}' for t in times)} ms), "
          f"{statistics.median(times) / wall:.2%} of the run's {wall:.2f} s")
    for megabytes in (1, 10, 100):
        result = Result(workload="bench/Big", status="ok",
                        outputs={"logits": np.random.default_rng(0).random(megabytes * 131072)})
        times = journal_seconds([result], run)
        print(f"one result with {megabytes} MB of outputs: median {statistics.median(times) * 1e3:.1f} ms "
              f"({', '.join(f'{t * 1e3:.1f}' for t in times)} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
