"""`bisect --check compat --from PRODUCER`: which commit or release broke loading of the models a producer saved.

A compat probe is not a run of the workload: it is `compat.check` of the probe's build against the models the
producer saved (the stored manifests, verified by sha256, as `modelci compat` loads them). Each probe's compat
entries are folded into one result per workload, so that the search and the report treat it like any probe:

- `ok`: every saved model of the producer loads in the probe's build and gives the producer's outputs;
- `failed`: one does not (`load_failed`, `outputs_differ`, `unsupported`, `unreadable`); the reason lists each
  format's outcome and error;
- `error`: the probe's build or environment, or the consumer's (`not_checked`), could not be made, so it cannot
  be judged (a skip).

The producer is `--from` (a ref of the repository, a target spec, a version); without it the good end is the
producer, and it is run first (with reuse) so that its saved models are in the store.

`--into CONSUMER` asks the other way round (what a `forward` compat alarm reports: a newer build saves models an
older one no longer reads): each probe first runs the workload in the probe's build (with reuse), which stores the
models it saves, then loads them into the consumer (`compat.check --direction forward`). The probe keeps the run's
id, and the culprit is the first build whose own models the consumer no longer loads.
"""

from __future__ import annotations

from typing import Any

from modelci.errors import BisectRefused, UserError
from modelci.records import Result

#: the check's name, as `--check` spells it
CHECK = "compat"


class CompatProber:
    """Runs compat probes for a bisect: the producer's stored models loaded into each probed build."""

    def __init__(self, config: Any, suite_specs: list[str], pattern: str | None, from_spec: str | None,
                 producer_spec: str, log: Any, *, into_spec: str | None = None, prober: Any = None):
        self.config, self.suite_specs, self.pattern = config, suite_specs, pattern
        self.from_spec = (from_spec or "").strip() or None
        self.producer_spec, self.log = producer_spec, log
        #: forward: the consumer that loads each probe's own saved models (None: backward, the producer's models)
        self.into_spec = (into_spec or "").strip() or None
        #: the bisect's prober, whose warm workers and open history a forward probe's run uses
        self.prober = prober

    @property
    def metric(self) -> str:
        """What the bisect follows, as its report names it."""
        if self.into_spec is not None:
            return f"compat of each probe's saved models into {self.into_spec}"
        return f"compat from {self.producer}"

    def prepare(self) -> None:
        """Without --from the good end saved the models: run it (reusing a stored run) so the store holds them."""
        if self.from_spec is not None or self.into_spec is not None:
            return
        from modelci import workflow
        from modelci.report.console import Progress

        self.log(f"the good end {self.producer_spec} is the producer: its saved models are loaded at each probe")
        workflow.run(self.config, self.producer_spec, self.suite_specs, self.pattern, reuse=True,
                     progress=Progress(quiet=True), alarms=False,
                     store=getattr(self.prober, "store", None)).refuse_config_errors()

    @property
    def producer(self) -> str:
        """What `compat.check` gets as --from: the producer the user named, or the good end's spec."""
        return self.from_spec or self.producer_spec

    def probe(self, spec: str, round: int) -> tuple[dict[str, Result], dict[str, Any]]:
        """(workload id -> the folded result, meta) for one probed build, as `_Prober` returns for runs."""
        from modelci import compat
        from modelci.report.console import Progress

        store = getattr(self.prober, "store", None)
        meta: dict[str, Any] = {"run_id": None, "reused": False}
        try:
            if self.into_spec is not None:
                meta = self._save_models(spec)
                outcome = compat.check(self.config, spec, self.suite_specs, self.pattern, from_spec=self.into_spec,
                                       from_option="--into", direction="forward", progress=Progress(quiet=True),
                                       store=store)
            else:
                outcome = compat.check(self.config, spec, self.suite_specs, self.pattern, from_spec=self.producer,
                                       progress=Progress(quiet=True), store=store)
        except UserError as exc:
            if round == 0:
                raise  # an end that cannot be checked (no stored models, a build that fails) is bad input
            return {}, {**meta, "why": f"untestable: {str(exc).splitlines()[0]}"}
        return fold(outcome.entries), {**meta, "check_id": outcome.check_id}

    def _save_models(self, spec: str) -> dict[str, Any]:
        """Run the workload in the probe's build (reusing a stored run), so that the models it saves are stored."""
        from modelci import workflow
        from modelci.report.console import Progress

        outcome = workflow.run(self.config, spec, self.suite_specs, self.pattern, reuse=True,
                               progress=Progress(quiet=True), alarms=False, pool=getattr(self.prober, "pool", None),
                               compile_bytecode=False, store=getattr(self.prober, "store", None))
        outcome.refuse_config_errors()  # as a probe's run does (bisect._Prober)
        run_id = outcome.run_id or next((r.run_id for r in outcome.results if r.run_id is not None), None)
        return {"run_id": run_id, "reused": all(r.reused for r in outcome.results)}

    def evidence(self, good: Result, bad: Result, good_label: str, bad_label: str) -> str:
        """Why the ends bracket a compat break (`evidence`, worded for the direction); raises BisectRefused."""
        if self.into_spec is None:
            return evidence(good, bad, good_label, bad_label)
        return evidence(good, bad, good_label, bad_label,
                        what=f"the models it saved of {good.workload} do not load in {self.into_spec}",
                        loads=f"the models it saved of {bad.workload} load and match in {self.into_spec}",
                        at=f"its own models in {self.into_spec}")


def fold(entries: list[Any]) -> dict[str, Result]:
    """One result per workload from its compat entries (every format, every record of the producer)."""
    from modelci import compat

    by_workload: dict[str, list[Any]] = {}
    for entry in entries:
        by_workload.setdefault(entry.workload, []).append(entry)
    results = {}
    for workload, found in by_workload.items():
        unbuilt = [e for e in found if e.outcome == "not_checked"]
        bad = [e for e in found if e.gating]
        if bad:
            status = "failed"
        elif unbuilt:
            status = "error"  # the consumer's environment could not be made: untestable, not bad
        elif all(e.outcome == "missing" for e in found):
            status = "error"  # the suite has no such workload: nothing was loaded
        else:
            status = "ok"
        # several producer builds (the same commit run with pythonpath and as a wheel): each part says whose it is
        shown = compat.shown_labels([e.producer for e in found])
        several = len({e.producer.get("label") for e in found}) > 1
        reason = "; ".join(f"{e.format}" + (f" saved by {shown.get(e.producer.get('label'), '?')}" if several else "")
                           + f": {e.outcome}" + (f" ({e.error.splitlines()[0]})" if e.error else "")
                           for e in (bad or unbuilt or found))
        outcomes = {f"{e.format} saved by {e.producer.get('label')}": e.outcome for e in found}
        results[workload] = Result(workload=workload, status=status, reason=reason if status != "ok" else "",
                                   info={"compat": outcomes})
    return results


def verdict(result: Result | None) -> tuple[str, str, dict[str, Any]]:
    """("good" | "bad" | "skip", why, numbers) of one compat probe."""
    if result is None:
        return "skip", "no saved model of the producer for the workload", {}
    numbers = {"outcomes": result.info.get("compat", {})}
    if result.status == "ok":
        return "good", "the producer's models load and match", numbers
    if result.status == "error":
        return "skip", f"untestable: {result.reason}", numbers
    return "bad", result.reason, numbers


def evidence(good: Result, bad: Result, good_label: str, bad_label: str, *, what: str = "", loads: str = "",
             at: str = "") -> str:
    """Why the ends bracket a compat break; raises BisectRefused when they do not. `what`, `loads` and `at` word
    it for a forward bisect (each probe's own models into a consumer)."""
    if good.status == "error":
        raise BisectRefused(f"the good end {good_label} cannot be tested: {good.reason}")
    if good.status != "ok":
        what = what or f"the producer's models of {good.workload} do not load there"
        raise BisectRefused(f"the good end {good_label} is not good: {what} ({good.reason}); pick a good end where "
                            "they load")
    if bad.status == "error":
        raise BisectRefused(f"the bad end {bad_label} cannot be tested: {bad.reason}")
    if bad.status == "ok":
        loads = loads or f"the producer's models of {bad.workload} load and match there"
        raise BisectRefused(f"the bad end {bad_label} is not bad: {loads}; nothing to bisect")
    return f"at {bad_label}{' (' + at + ')' if at else ''}: {bad.reason}"
