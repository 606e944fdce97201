"""A real SQLite history fed with synthetic results through Store.ingest and judged as `modelci run` judges them
(workflow.evaluate, then the alarm step), for the alarm and notifier tests: fast, with no environment to build."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path

import numpy as np

from modelci import config as config_module
from modelci import workflow
from modelci.alarms import hooks
from modelci.envs.build import Environment
from modelci.records import Metric, Result
from modelci.store import Store
from modelci.targets import Target


def timed(workload: str, infer: float = 0.1, *, n: int = 7, noise: float = 0.01, seed: int = 0,
          extra: dict[str, list[float]] | None = None, status: str = "ok", reason: str = "") -> Result:
    """A result with `time.infer` samples around `infer` seconds (relative noise), a loss curve and peak RSS."""
    rng = np.random.default_rng(seed)
    metrics = {
        "time.infer": Metric("time.infer", "samples", [float(v) for v in infer * (1 + noise * rng.standard_normal(n))],
                             "s"),
        "mem.peak_rss": Metric("mem.peak_rss", "samples", [100.0 * 2**20], "bytes"),
        "loss": Metric("loss", "curve", [1.0 / (step + 1) for step in range(8)]),
    }
    for name, values in (extra or {}).items():
        metrics[name] = Metric(name, "samples", [float(v) for v in values])
    if status != "ok":
        metrics = {}
    return Result(workload=workload, status=status, reason=reason, code_hash="c0de", metrics=metrics)


class History:
    """A project folder with a modelci.toml and its history; `run` ingests and judges one synthetic run."""

    def __init__(self, root: Path, toml: str = "", runner: str = "ci", today=None):
        root.mkdir(parents=True, exist_ok=True)
        (root / "modelci.toml").write_text(f'runner = "{runner}"\n' + toml)
        self.root = root
        self.config = config_module.load(cwd=root, environ={}, today=today)
        self.store = Store(self.config.db, self.config.artifacts)
        self.env = Environment(id="synthetic-env", path=None, python=Path("/usr/bin/python3"), spec=None,
                               lock="fw==synthetic\n", fingerprint={}, isolated=True)

    def with_runner(self, runner: str) -> config_module.Config:
        """The same config on another runner."""
        return dataclasses.replace(self.config, runner=runner)

    def run(self, version: str, results: list[Result], *, runner: str | None = None,
            started_at: datetime | None = None, today=None, name: str = "fw",
            alarms: bool = True) -> workflow.RunOutcome:
        """Store one run of `name==version`, compare it with the baselines, and run the alarm step (unless told
        not to: a run back-dated to the past only makes the history, it happens in no present)."""
        config = self.with_runner(runner) if runner else self.config
        target = Target(spec=f"{name}=={version}", kind="requirement", name=name, requirements=[f"{name}=={version}"],
                        version=version)
        run_id = self.store.ingest(target=target, environment=self.env, runner=config.runner, results=results,
                                   started_at=started_at)
        comparisons = workflow.evaluate(config, self.store, target, results)
        outcome = workflow.RunOutcome(run_id=run_id, target=target, environment=self.env, runner=config.runner,
                                      comparisons=comparisons)
        hooks.check_config(config, self.store, outcome)  # as workflow does, alarms or not
        if alarms:
            outcome.alarms = hooks.after_run(config, self.store, outcome, today=today)
        return outcome
