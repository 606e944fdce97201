"""Entry points for backward compatibility, run inside an environment under test.

    python -m modelci.workload.compat_child load --suite NAME=DIR ... --jobs FILE --out DIR
    python -m modelci.workload.compat_child inputs --suite NAME=DIR ... --jobs FILE --out DIR

`load` takes a list of saved models. For each one it seeds the framework and calls `setup(ctx)` with the
producer's seed, so the data is made again exactly as the producer made it. It then calls `load(ctx, fmt,
path)` (the workload's own, or the framework helper's) and `infer(ctx)`. The outputs go to
`OUT/<index>/outputs/*.npy` for the parent to compare with the producer's. The parent has verified each
file's sha256 before handing it over. `inputs` writes what `example_inputs()` returns after `setup`, so
that the producer's inputs are kept as arrays next to its outputs.

One process handles many jobs, because the interpreter and the framework are imported once. Before each
job the process writes its index to `OUT/current`, and after it `OUT/<index>/result.json`. When the process
dies or hangs, the parent knows which job did it, records that job, and starts a new process for the rest.
Standard library only, like `child.py`, whose helpers this module reuses.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any

from modelci.workload import lifeline
from modelci.workload.api import Context, SkipWorkload, Workload, exception_text
from modelci.workload.child import (
    drop_working_directory,
    enter_suite,
    exit_reason,
    failure_traceback,
    find_class,
    format_reason,
    module_info,
    overrides,
    parse_suites,
    save_outputs,
    skip_reason,
)
from modelci.workload import frameworks
from modelci.workload.frameworks import get_helper

#: version of the files this module writes for the parent
PROTOCOL = 1


class MissingWorkload(Exception):
    """The suite no longer defines the workload that saved the model."""


class Jobs:
    """Runs jobs one after the other, keeping imported workload classes and helpers between them."""

    def __init__(self, suites: dict[str, Path], out: Path):
        self.suites = suites
        self.out = out
        self.classes: dict[tuple[str, str | None], type[Workload]] = {}

    def find(self, workload_id: str, file: str | None) -> type[Workload]:
        """The workload class, from the file the producer's class was in, else from anywhere in its suite.

        Each class is imported once per process: a second import would make a second class. A workload that
        is no longer in its suite raises MissingWorkload; a suite file that fails to import raises its error.
        """
        key = (workload_id, file)
        if key not in self.classes:
            suite = workload_id.partition("/")[0]
            if suite not in self.suites:
                raise MissingWorkload(f"suite {suite!r} is not among the suites given")
            try:
                found = find_class(self.suites, workload_id, file)[0] if file and Path(file).is_file() else None
            except LookupError as exc:
                if type(exc) is not LookupError:  # a KeyError raised while importing the file is a failure
                    raise
                found = None  # the class moved to another file of the suite, or is gone
            if found is None:
                try:
                    found = find_class(self.suites, workload_id)[0]
                except LookupError as exc:
                    if type(exc) is not LookupError:
                        raise
                    raise MissingWorkload(f"{workload_id} is no longer in suite {suite!r}") from None
            self.classes[key] = found
        return self.classes[key]

    def start(self, job: dict[str, Any]) -> dict[str, Any]:
        """Announce a job (the parent's watchdog reads OUT/current) and give its empty record."""
        index = job["index"]
        # no write-and-rename: a parent that reads half a line takes it for no change and reads again
        (self.out / "current").write_text(f"{index} {time.time()}\n")
        (self.out / str(index)).mkdir(parents=True, exist_ok=True)
        return {"protocol": PROTOCOL, "index": index, "workload": job["workload"], "format": job.get("format", ""),
                "status": "ok", "reason": "", "traceback": "", "phase": "start", "times": {}, "outputs": {},
                "inputs": None, "unsafe": False}

    def finish(self, record: dict[str, Any]) -> None:
        """Write the job's record. The parent reads it only once this process has ended, and takes a record
        cut short by a crash for no record, so no write-and-rename is needed."""
        (self.out / str(record["index"]) / "result.json").write_text(json.dumps(record, default=str))

    def prepare(self, job: dict[str, Any], record: dict[str, Any]) -> tuple[Workload, Context, Any]:
        """Find the class, seed the framework and run `setup` with the producer's seed."""
        record["phase"] = "import"
        cls = self.find(job["workload"], job.get("file"))
        # the folder of the class's file on sys.path again, as another suite's may have followed it: what `setup`,
        # `load` or an unpickled model imports by name (`_common`) must be this suite's helper
        enter_suite(Path(inspect.getfile(cls)).parent)
        helper = get_helper(cls.framework)
        helper.seed(int(job["seed"]))
        helper.set_determinism(True)
        # one scratch folder for the whole process: jobs run one at a time, and a folder per job costs time
        ctx = Context(seed=int(job["seed"]), device=job.get("device", "cpu"), scratch=self.out / "scratch")
        ctx.scratch.mkdir(exist_ok=True)
        workload = cls()
        record["unsafe"] = cls.format_unsafe(job.get("format", ""), helper.unsafe_formats)
        return workload, ctx, helper

    def inputs(self, workload: Workload, helper: Any, record: dict[str, Any]) -> None:
        """Write `example_inputs()` as arrays, when the workload has it (the convention of the torch and
        paddle helpers: the tensors `infer` feeds the model)."""
        if not callable(getattr(workload, "example_inputs", None)):
            return
        record["phase"] = "inputs"
        value = workload.example_inputs()
        named = value if isinstance(value, dict) else {f"input_{i}": v for i, v in enumerate(value)}
        folder = self.out / str(record["index"])
        record["inputs"] = save_outputs(named, helper, folder / "inputs") if named else {}

    def load(self, job: dict[str, Any]) -> dict[str, Any]:
        """Set up, load the saved model and infer; any failure is recorded with the phase it happened in."""
        record = self.start(job)
        fmt = job["format"]
        try:
            workload, ctx, helper = self.prepare(job, record)
            # the workload's own load wins over the helper's for any format name; its `supports` may narrow it
            reason = format_reason(workload, type(workload), helper, fmt, "load")
            if reason:
                record.update(status="unsupported", reason=str(reason))
                return record
            record["phase"] = "setup"
            start = time.perf_counter()
            workload.setup(ctx)
            record["times"]["setup"] = time.perf_counter() - start
            if job.get("inputs"):
                self.inputs(workload, helper, record)
            record["phase"] = "load"
            cls = type(workload)
            start = time.perf_counter()
            if overrides(cls, "load"):
                workload.load(ctx, fmt, Path(job["path"]))
            else:
                helper.load(workload, ctx, fmt, Path(job["path"]))
            helper.synchronize()
            record["times"]["load"] = time.perf_counter() - start
            record["phase"] = "infer"
            start = time.perf_counter()
            outputs = workload.infer(ctx)
            helper.synchronize()
            record["times"]["infer"] = time.perf_counter() - start
            record["phase"] = "outputs"
            record["outputs"] = save_outputs(outputs, helper, self.out / str(job["index"]) / "outputs")
        except MissingWorkload as exc:
            record.update(status="missing", reason=str(exc))
        except SkipWorkload as exc:
            # the workload itself says it cannot do this here: closest to a format this version lacks
            record.update(status="unsupported", reason=f"skipped by the workload: {skip_reason(exc)}")
        except BaseException as exc:  # noqa: BLE001 - whatever the framework raises on load is the finding
            raise_as_failed(record, exc)
        return record

    def example_inputs(self, job: dict[str, Any]) -> dict[str, Any]:
        """Set up with the seed and write `example_inputs()` (the producer's inputs, kept as arrays)."""
        record = self.start(job)
        try:
            workload, ctx, helper = self.prepare(job, record)
            record["phase"] = "setup"
            workload.setup(ctx)
            self.inputs(workload, helper, record)
        except BaseException as exc:  # noqa: BLE001 - the inputs are optional: the seed alone still reproduces them
            raise_as_failed(record, exc)
        return record


def raise_as_failed(record: dict[str, Any], exc: BaseException) -> None:
    """Mark a record `load_failed` with the exception, the phase it came from, and the traceback.

    The reason is formatted safely (an exception whose `__str__` raises gave no record at all), and a workload's
    own SystemExit or KeyboardInterrupt is a failure of its job like any exception, not the end of the process
    and of every job after it: the parent stops this process with signals (child.exit_reason says why).
    """
    reason = exception_text(exc) if isinstance(exc, Exception) else exit_reason(exc, record["phase"])
    record.update(status="load_failed", reason=f"{reason} (in {record['phase']})", traceback=failure_traceback(exc))


def main(argv: list[str] | None = None) -> int:
    """Dispatch the `load` and `inputs` entry points over a job file."""
    drop_working_directory()
    lifeline.from_environment()  # a spawned child dies with the harness (workload/lifeline.py)
    parser = argparse.ArgumentParser(prog="modelci.workload.compat_child")
    parser.add_argument("command", choices=("load", "inputs"))
    parser.add_argument("--suite", action="append", default=[])
    parser.add_argument("--jobs", required=True, help="JSON list of jobs")
    parser.add_argument("--out", required=True)
    parser.add_argument("--report-module", action="append", default=[])
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runner = Jobs(parse_suites(args.suite), out)
    for job in json.loads(Path(args.jobs).read_text()):
        record = runner.load(job) if args.command == "load" else runner.example_inputs(job)
        runner.finish(record)
    (out / "modules.json").write_text(json.dumps(module_info(sorted({*frameworks.framework_modules(),
                                                                      *args.report_module}))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
