"""Entry points that run inside the environment under test: `list` discovers, `run` executes one workload.

The parent talks to this module only through files: JSON for results and `.npy` for arrays
(docs/design.md, "The workload contract"). Standard library only; numpy and the framework are imported
lazily, from the environment under test.

    python -m modelci.workload.child list --suite NAME=DIR ... --out FILE
    python -m modelci.workload.child run --suite NAME=DIR --workload ID --out DIR [--seed N] ...
"""

from __future__ import annotations

import argparse
import errno
import gc
import hashlib
import importlib.util
import inspect
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from modelci.workload import lifeline, npy
from modelci.workload.api import (METRIC_NAME_MAX, Context, SkipWorkload, Workload, exception_message,
                                  exception_repr, exception_text, shown)
from modelci.workload import frameworks
from modelci.workload.frameworks import get_helper
from modelci.workload.processes import framework_hazard, signal_name, thread_count

#: version of the files this module writes for the parent
PROTOCOL = 1


# -- discovery ------------------------------------------------------------------------------------


#: the start of the module name each suite file is imported under
SUITE_MODULE = "modelci_suite_"


def suite_files(folder: Path) -> list[Path]:
    """The workload files of a suite folder: every `*.py` not starting with `_`, in name order (regular files only,
    see `_sources`)."""
    return _sources(folder, "*.py", helper=False)


def helper_files(folder: Path) -> list[Path]:
    """The helper modules of a suite folder: every `*.py` starting with `_`, in name order.

    Suite files import them by name (`import _common`); they are never searched for workloads.
    """
    return _sources(folder, "_*.py", helper=True)


def _sources(folder: Path, pattern: str, helper: bool) -> list[Path]:
    """The regular files of `folder` matching `pattern`, hidden ones left out: an editor's lock file (`.#w.py`, a
    symlink to nowhere), a symlink loop, a folder or a FIFO named `*.py` ended the whole run's discovery with a
    traceback (a FIFO hung it)."""
    return sorted(p for p in folder.glob(pattern)
                  if not p.name.startswith(".") and p.name.startswith("_") == helper and p.is_file())


def code_hash(path: Path) -> str:
    """The reuse key of a workload file's code: the sha256 of its bytes and of every helper (`_*.py`) beside it.

    A workload that imports `_common` runs what `_common.py` says too, so a changed helper must make `--reuse`
    measure again. Every helper counts, imported or not: which ones a file imports is known only by running it.
    A folder without helpers gives the hash of the file alone, so results stored before helpers stay reusable.
    """
    digest = hashlib.sha256(path.read_bytes())
    for helper in helper_files(path.parent):
        data = helper.read_bytes()
        digest.update(f"\0{helper.name}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


#: the suite folders put on sys.path by `enter_suite` (resolved); the last one is in use
_entered: list[str] = []


def enter_suite(folder: Path) -> None:
    """Make the modules of one suite folder importable by name (`import _common` in a suite file), and no other's.

    The folder goes at the end of sys.path, so that a suite file named like an installed module (`torch.py`)
    cannot shadow it. A suite folder entered before leaves sys.path, and the modules imported from it leave
    sys.modules (the suite files that imported them keep their own reference): one process discovers every
    suite, and two suites may each have a `_common.py`. The suite files themselves stay registered under their
    private names, which classes and pickles refer to.
    """
    entry = str(folder.resolve())
    for other in [e for e in _entered if e != entry]:
        _entered.remove(other)
        while other in sys.path:
            sys.path.remove(other)
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if isinstance(file, str) and file.startswith(other + os.sep) and not name.startswith(SUITE_MODULE):
                del sys.modules[name]
    if entry not in sys.path:
        sys.path.append(entry)
    if entry not in _entered:
        _entered.append(entry)


def import_file(path: Path, suite: str) -> Any:
    """Import one suite file by path under a module name private to its suite, with its folder's modules
    importable (`enter_suite`)."""
    module_name = re.sub(r"\W", "_", f"{SUITE_MODULE}{suite}_{path.stem}")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    enter_suite(path.parent)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def workload_classes(module: Any) -> list[type[Workload]]:
    """Workload subclasses defined in `module` itself (not imported into it), in source order.

    A class made by a factory (`Made = make(...)`, or `type(...)`) counts as well: it is found by the name the
    module binds it to, and placed after the classes whose source line is known, in binding order. A class bound
    to two names is one workload.
    """
    found: list[type[Workload]] = []
    for obj in vars(module).values():
        if (isinstance(obj, type) and issubclass(obj, Workload) and obj is not Workload
                and obj.__module__ == module.__name__ and not obj.__name__.startswith("_")
                and not inspect.isabstract(obj) and obj not in found):
            found.append(obj)
    return sorted(found, key=lambda cls: (source_line(cls) or float("inf"), found.index(cls)))


def source_line(cls: type) -> int | None:
    """The line where `cls` is defined, or None when Python cannot say (a class made by `type(...)`)."""
    try:
        return inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return None


#: what a workload name may hold: letters, digits, `_`, `.`, `-`, `+`, `=`; it names folders and files, so no
#: separator, no leading dot (`..`), no space or control character
NAME_RULE = re.compile(r"[^\W][\w.+=-]*")
#: the longest workload name
NAME_MAX = 100


def resources_problem(resources: Any) -> str:
    """What is wrong with a workload's `resources`, or "" (a table of resource name -> amount, none negative)."""
    if not isinstance(resources, dict):
        return f"`resources` must be a dict of resource name -> amount (e.g. {{\"gpu\": 1}}), not {resources!r}"
    for key, amount in resources.items():
        if not isinstance(key, str) or not key:
            return f"`resources` names a resource {key!r}; names are non-empty strings"
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not amount >= 0:
            return f"`resources` asks for {amount!r} of {key!r}; an amount is a number, 0 or more"
    return ""


def counts_problem(cls: type) -> str:
    """What is wrong with a workload's `devices` (ranks per node) or `nodes` (machines), or "" (whole numbers, 1
    or more)."""
    for attribute in ("devices", "nodes"):
        value = getattr(cls, attribute, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"`{attribute}` must be a whole number, 1 or more, not {value!r}"
    return ""


#: the whole-number attributes the child reads besides `devices` and `nodes`: name -> (least, what it means).
#: `steps = 0` is a workload without training (no loss curve, no train time: run_phases records none), and
#: `warmup = 0` times the first inference too; a run needs at least one timed inference.
WHOLE_NUMBERS = {
    "steps": (0, "the training steps to record; 0: none"),
    "warmup": (0, "the untimed inference calls before the timed ones"),
    "repeats": (1, "the timed inference calls"),
}
#: the most of each: every training step and timed call is one value of a metric that the history keeps whole
#: in each run's row (a JSON list), and every report reads it back. 100,000 is about 2 MB per metric and run;
#: `repeats = 10**9` asked for a run that would have filled the history. config's `repeats` has the same bound.
WHOLE_NUMBER_MAX = 100_000


def numbers_problem(cls: type) -> str:
    """What is wrong with a workload's `steps`, `warmup` or `repeats`, or "". A wrong one used to stop discovery
    of the whole suite (`int("x")`), and a negative one was taken for none."""
    for attribute, (least, meaning) in WHOLE_NUMBERS.items():
        value = getattr(cls, attribute)
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= WHOLE_NUMBER_MAX:
            return (f"`{attribute}` must be a whole number from {least} to {WHOLE_NUMBER_MAX:,} ({meaning}), "
                    f"not {shown(value)}")
    return ""


def requires_problem(requires: Any) -> str:
    """What is wrong with a workload's `requires`, or "" (a list or tuple of strings).

    A string is refused, not read as a list: `list("scipyx")` asked the installer for the packages c, i, p, s, x
    and y. Whether each string is a requirement is the parent's to check, with packaging (steps.select): the
    environment under test may not have it, and a grammar written again here would be a second owner of it.
    """
    example = 'e.g. requires = ["scipy>=1.11"]'
    if not isinstance(requires, (list, tuple)):
        return f"`requires` must be a list of requirement strings ({example}), not {shown(requires)}"
    for entry in requires:
        if not isinstance(entry, str):
            return f"`requires` holds {shown(entry)}; give a list of requirement strings ({example})"
    return ""


def formats_problem(formats: Any) -> str:
    """What is wrong with a workload's `formats`, or "" (a list or tuple of format names). A format names the
    file or folder the model is saved at, so its name follows the rule of workload names."""
    if not isinstance(formats, (list, tuple)):
        return (f"`formats` must be a tuple of format names (e.g. formats = (\"npz\",)), not {shown(formats)}; "
                "a single format is (\"npz\",), with the comma")
    for fmt in formats:
        if not isinstance(fmt, str) or name_problem(str(fmt)):
            return (f"`formats` holds {shown(fmt)}; a format name is a non-empty string of letters, digits and "
                    "_ . - + =, as the helper's formats (\"state_dict\", \"npz\") or a modelci.Format")
    names = [str(fmt) for fmt in formats]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:  # each was saved, stored and checked once per mention, and a Format's `unsafe` could disagree
        return f"`formats` names {', '.join(map(repr, twice))} more than once; name each format once"
    return ""


#: the longest `framework` or `domain` the history stores
LABEL_MAX = 40


def text_problem(cls: type) -> str:
    """What is wrong with a workload's `framework` or `domain`, or "" (strings; which frameworks exist is the
    child's to say when it runs the workload, with the registry's names)."""
    if not isinstance(cls.framework, str) or not cls.framework:
        return f"`framework` must be the name of a framework such as \"torch\", not {shown(cls.framework)}"
    if not isinstance(cls.domain, str):
        return f"`domain` must be a string such as \"vision\", not {shown(cls.domain)}"
    for attribute in ("framework", "domain"):  # the history's columns hold 40 (PostgreSQL refused the run)
        if len(getattr(cls, attribute)) > LABEL_MAX:
            return f"`{attribute}` is {len(getattr(cls, attribute))} characters long; the most is {LABEL_MAX}"
    return ""


def attributes_problem(cls: type[Workload]) -> str:
    """What is wrong with any class attribute that discovery or the child reads (`resources`, `devices`,
    `nodes`, `steps`, `warmup`, `repeats`, `formats`, `requires`, `framework`, `domain`), or "". Each names the
    attribute, the value and what to give; a class with a wrong one is an error of its own, and the other
    workloads of its suite still run."""
    return (resources_problem(getattr(cls, "resources", {})) or counts_problem(cls) or numbers_problem(cls)
            or formats_problem(cls.formats) or requires_problem(cls.requires) or text_problem(cls))


def name_problem(name: Any) -> str:
    """Why `name` cannot be a workload name (the rule it breaks), or "" when it can."""
    if not isinstance(name, str) or not name:
        return f"the name must be a non-empty string, not {name!r}"
    if len(name) > NAME_MAX:
        return f"the name is {len(name)} characters long; the most is {NAME_MAX}"
    if not NAME_RULE.fullmatch(name):
        return ("a name may hold only letters, digits and _ . - + =, and start with a letter, digit or _ "
                "(it names files and folders: no '/', no '..', no spaces)")
    return ""


def error_location(exc: BaseException, path: Path) -> int | None:
    """The line of `path` where an import failed: the SyntaxError line or the deepest frame in that file."""
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).resolve() == path.resolve():
        return exc.lineno
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == path.resolve():
            line = frame.lineno
    return line


def helper_location(exc: BaseException, path: Path) -> tuple[Path, int | None] | None:
    """Where an import of `path` failed inside another module of its suite folder (a helper such as
    `_common.py`): the deepest frame there; None when that is in `path` itself. A SyntaxError needs none:
    its message names its file and line."""
    folder = path.parent.resolve()
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not frame.filename.startswith("<") and Path(frame.filename).resolve().parent == folder]
    if not frames or Path(frames[-1].filename).resolve() == path.resolve():
        return None
    return path.parent / Path(frames[-1].filename).name, frames[-1].lineno  # named as `path` is


def suite_traceback(exc: BaseException, path: Path) -> str:
    """The traceback of a failed import of `path`, from the first frame in its suite folder on: the frames of
    modelci's child and of importlib above it say nothing about the user's code (a SyntaxError has none of its
    own: its message shows the file, the line and the caret)."""
    folder = path.parent.resolve()
    frames = traceback.extract_tb(exc.__traceback__)

    def in_suite(frame: traceback.FrameSummary) -> bool:
        if frame.filename.startswith("<"):
            return False
        file = Path(frame.filename).resolve()
        return folder in file.parents

    start = next((i for i, frame in enumerate(frames) if in_suite(frame)), len(frames))
    head = ["Traceback (most recent call last):\n", *traceback.format_list(frames[start:])] if start < len(frames) \
        else []
    return "".join(head + traceback.format_exception_only(type(exc), exc))


#: the harness's own code in the modelci the child runs from (in a run, the shim's copy): modelci/workload, not
#: the whole package, whose built-in zoo is workload code like any suite's
_HARNESS = Path(__file__).resolve().parent


def failure_traceback(exc: BaseException) -> str:
    """The traceback of a workload's failure from its first frame outside the harness (modelci/workload) on,
    chained exceptions kept: the child's own frames above the workload's code say nothing about it, and a
    failure the harness raised itself
    (an infer() that returned no dict, an output name it refuses) has none: its reason already says what to
    fix."""
    summary = traceback.TracebackException.from_exception(exc)
    frames = list(summary.stack)

    def ours(frame: traceback.FrameSummary) -> bool:
        return not frame.filename.startswith("<") and _HARNESS in Path(frame.filename).resolve().parents

    start = next((i for i, frame in enumerate(frames) if not ours(frame)), len(frames))
    if start == len(frames) and exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__):
        return ""  # the reason says it all
    summary.stack = traceback.StackSummary.from_list(frames[start:])
    return "".join(summary.format())


def describe(cls: type[Workload], suite: str, path: Path, code_hash: str) -> dict[str, Any]:
    """The discovery record of one workload class, whose attributes `attributes_problem` found right."""
    return {
        "id": f"{suite}/{cls.workload_name()}",
        "name": cls.workload_name(),
        "class": cls.__name__,
        "suite": suite,
        "file": str(path),
        "framework": cls.framework,
        "domain": cls.domain,
        "steps": cls.steps,
        "formats": [str(fmt) for fmt in cls.formats],
        "devices": cls.devices,
        "nodes": getattr(cls, "nodes", 1),
        "requires": list(cls.requires),
        "resources": {str(k): float(v) for k, v in dict(getattr(cls, "resources", {})).items()},
        "code_hash": code_hash,
    }


def shown_name(cls: type[Workload]) -> str:
    """The workload name of `cls` as a message shows it (repr), safe against a `name` that cannot be shown."""
    try:
        return repr(cls.workload_name())
    except Exception:  # noqa: BLE001 - a `name` whose repr raises is still a wrong name
        return f"of type {type(getattr(cls, 'name', None)).__name__}"


def workload_id(suite: str, path: Path, cls: type[Workload]) -> str:
    """The id an error of class `cls` is stored under: its workload id when its name is a usable one, else the
    file and the class (a name that is not a string cannot make an id)."""
    try:
        name = cls.workload_name()
    except Exception:  # noqa: BLE001 - see shown_name
        name = None
    if isinstance(name, str) and not name_problem(name):
        return f"{suite}/{name}"
    return f"{suite}/{path.name}:{cls.__name__}"


#: the line discovery writes to stderr before it imports each suite file
IMPORTING = "modelci: importing "


def discover(suites: dict[str, Path]) -> dict[str, Any]:
    """Import every suite file; return the workloads found and one error per file that failed."""
    workloads: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for suite, folder in suites.items():
        for path in suite_files(folder):
            digest = code_hash(path)
            # the parent names the file that a discovery which never ended was importing (execute/local.py)
            print(f"{IMPORTING}{path}", file=sys.stderr, flush=True)
            try:
                module = import_file(path, suite)
                classes = workload_classes(module)
            except BaseException as exc:  # noqa: BLE001 - a suite file may raise anything, even SystemExit
                line = error_location(exc, path)
                message = exception_text(exc)
                helper = helper_location(exc, path)
                if helper:  # the line of `path` is where it imports the helper; say where the helper failed
                    message += f" (in {helper[0]}, line {helper[1]})"
                errors.append(
                    {
                        "suite": suite,
                        "file": str(path),
                        "line": line,
                        "message": message,
                        "traceback": suite_traceback(exc, path),
                        "code_hash": digest,
                    }
                )
                continue
            for cls in classes:
                where = {"suite": suite, "file": str(path), "line": source_line(cls), "code_hash": digest}
                try:
                    problem = name_problem(cls.workload_name())
                    wrong = "" if problem else attributes_problem(cls)
                    found = None if problem or wrong else describe(cls, suite, path, digest)
                except Exception as exc:  # noqa: BLE001 - a class attribute may raise when read; only its class fails
                    problem, wrong = "", f"reading its attributes raised {exception_text(exc)}"
                if problem:
                    errors.append(where | {"workload": f"{suite}/{path.name}:{cls.__name__}",
                                           "message": f"class {cls.__name__}: workload name {shown_name(cls)} is "
                                                      f"not allowed: {problem}; set `name` to one that is"})
                elif wrong:
                    errors.append(where | {"workload": workload_id(suite, path, cls),
                                           "message": f"class {cls.__name__}: {wrong}"})
                else:
                    workloads.append(found | {"line": where["line"]})
    return {"protocol": PROTOCOL, "workloads": workloads, "errors": errors + duplicates(workloads)}


def duplicates(workloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Workloads that share an id: all of them leave `workloads` (in place), and each id becomes one error
    naming every place that defines it. Their results would be merged in the history under one id."""
    places: dict[str, list[dict[str, Any]]] = {}
    for workload in workloads:
        places.setdefault(workload["id"], []).append(workload)
    errors = []
    for workload_id, defined in places.items():
        if len(defined) < 2:
            continue
        where = " and ".join(f"{w['file']}, line {w['line']} (class {w['class']})" if w.get("line")
                             else f"{w['file']} (class {w['class']})" for w in defined)
        errors.append({"suite": defined[0]["suite"], "file": defined[0]["file"], "line": defined[0].get("line"),
                       "workload": workload_id, "code_hash": defined[0]["code_hash"],
                       "message": f"workload id {workload_id!r} is defined {len(defined)} times: {where}; give each "
                                  "a different `name` (or class name)"})
        for workload in defined:
            workloads.remove(workload)
    return errors


# -- execution ------------------------------------------------------------------------------------


def proc_status() -> dict[str, int]:
    """The memory fields of /proc/self/status (VmHWM, VmRSS, RssAnon, RssFile, ...), in bytes; {} without /proc."""
    found = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if value.strip().endswith(" kB"):
                    found[name] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return found


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far.

    On Linux this reads VmHWM, which starts afresh at exec; ru_maxrss would carry over the peak of
    the forked harness process (over 100 MiB) into a child that uses a few MiB.
    """
    peak = proc_status().get("VmHWM")
    if peak is not None:
        return peak
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def reset_peak_rss() -> bool:
    """Start the peak RSS (VmHWM) afresh from the current RSS, once the prologue is done; False where Linux
    cannot (before 4.0, or no /proc).

    The peak otherwise kept the transient of loading the framework's libraries, which moved with how the
    kernel held the library file and not with the model: paddle's LeNet peaked at 325, 352 or 412 MiB with
    the same code and environment (docs/zoo.md). Reset here, `mem.peak_rss` is the most the process
    held while the workload ran, its framework loaded: the same point in both isolation modes.
    """
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def rss_parts() -> dict[str, int]:
    """What the resident set holds now, in bytes: anonymous memory, pages of mapped files (the framework's
    libraries) and shared memory; {} where /proc does not say. Kept with each result, so that a change of the
    peak can be told apart: the file-backed part moves with how the libraries were mapped, not with the model
    (docs/zoo.md: paddle's peak drifted by 60 MiB between runs of the same code)."""
    status = proc_status()
    return {part: status[field] for field, part in (("RssAnon", "anon"), ("RssFile", "file"), ("RssShmem", "shmem"))
            if field in status}


def find_class(suites: dict[str, Path], workload_id: str, file: str | None = None) -> tuple[type[Workload], Path]:
    """Find the class behind a workload id (`suite/name`), importing only its own file when it is known.

    Importing only that file keeps one broken suite file from failing every workload of the suite.
    """
    suite, _, name = workload_id.partition("/")
    for path in [Path(file)] if file else suite_files(suites[suite]):
        for cls in workload_classes(import_file(path, suite)):
            if cls.workload_name() == name:
                return cls, path
    raise LookupError(f"workload {workload_id!r} not found in suite {suite!r}")


def module_info(names: list[str]) -> dict[str, dict[str, str]]:
    """Version and file of each already-imported top-level module, so the parent can prove what ran."""
    info = {}
    for name in names:
        module = sys.modules.get(name)
        if module is not None:
            info[name] = {"version": str(getattr(module, "__version__", "")),
                          "file": str(getattr(module, "__file__", ""))}
    return info


def freeze_heap() -> None:
    """Collect, then move every object alive now out of the garbage collector's reach (gc.freeze).

    The end of every workload's prologue, in a spawned child as in the worker a child is forked from, so both
    freeze the same objects and their timings compare. The framework's million objects are then not traversed
    again by each collection the workload triggers; in a forked child such a traversal also writes to the page
    of every object, which the kernel then copies (0.6 s over zoo:torch's 8 forked workloads). Objects
    alive at this point live as long as the process anyway.
    """
    gc.collect()
    gc.freeze()


def overrides(cls: type[Workload], method: str) -> bool:
    """Whether the workload class writes its own `method` rather than inheriting the base's."""
    return getattr(cls, method) is not getattr(Workload, method)


#: errno values of a disk with no room left, or a quota used up
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def no_space(exc: BaseException, folder: Path) -> str:
    """What to say of `exc` when it is a disk with no room left under `folder`, else "" (the scratch folder is in
    cache_dir, which is where more room is made)."""
    if not isinstance(exc, OSError) or exc.errno not in NO_SPACE:
        return ""
    return (f"no space left on the disk of {folder} ({exc.strerror}); free space there, or set cache_dir to a "
            "folder on a bigger disk")


class Recorder:
    """Collects what one execution produced and writes it as the result file."""

    def __init__(self, out: Path, workload_id: str):
        self.out = out
        self.data: dict[str, Any] = {
            "protocol": PROTOCOL,
            "workload": workload_id,
            "status": "ok",
            "reason": "",
            "traceback": "",
            "phase": "start",
            "metrics": {},
            "outputs": {},
            "saved": [],
            "info": {},
        }

    def metric(self, name: str, kind: str, unit: str, values: list[float]) -> None:
        """Record a metric series."""
        self.data["metrics"][name] = {"kind": kind, "unit": unit, "values": [float(v) for v in values]}

    def write(self) -> None:
        """Write result.json atomically, so the parent never reads half a file."""
        tmp = self.out / "result.json.tmp"
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.out / "result.json")


def save_outputs(outputs: Any, helper: Any, folder: Path) -> dict[str, dict[str, Any]]:
    """Convert each output to an array and write it as `.npy`; returns name -> {file, dtype, shape}."""
    if not isinstance(outputs, dict) or not outputs:
        raise TypeError(f"infer() must return a non-empty dict of name -> array, got {type(outputs).__name__}")
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, value in outputs.items():
        if not isinstance(name, str) or not name.replace("_", "").replace(".", "").replace("-", "").isalnum():
            raise ValueError(f"output name {name!r} must be letters, digits, '_', '-' or '.'")
        if len(name) > METRIC_NAME_MAX:  # the history's column; PostgreSQL refused the whole run
            raise ValueError(f"output name {name[:40]!r}... is {len(name)} characters long; the most is "
                             f"{METRIC_NAME_MAX}")
        path = folder / f"{name}.npy"
        try:
            dtype, shape = npy.save(path, helper.to_numpy(value))
        except (TypeError, ValueError) as exc:  # a value numpy cannot make one numeric array of
            raise TypeError(f"output {name!r} ({shown(value)}) cannot be stored: {exception_message(exc)}") from None
        written[name] = {"file": str(path.relative_to(folder.parent)), "dtype": dtype, "shape": shape}
    return written


def same_outputs(first: dict[str, Any], second: dict[str, Any], helper: Any) -> bool:
    """Whether two calls of infer returned bit-identical outputs."""
    if first.keys() != second.keys():
        return False
    return all(npy.to_bytes(helper.to_numpy(first[k])) == npy.to_bytes(helper.to_numpy(second[k])) for k in first)


def run_phases(workload: Workload, cls: type[Workload], ctx: Context, helper: Any, rec: Recorder, args: Any) -> None:
    """Setup, train, infer (warm-up + repeats) and save, each timed; metrics go into `rec`."""
    rec.data["phase"] = "setup"
    start = time.perf_counter()
    workload.setup(ctx)
    helper.synchronize()
    rec.metric("time.setup", "samples", "s", [time.perf_counter() - start])

    rec.data["phase"] = "train"
    losses, step_times = [], []
    for step in range(int(cls.steps)):
        start = time.perf_counter()
        loss = workload.train_step(ctx, step)
        helper.synchronize()
        step_times.append(time.perf_counter() - start)
        try:
            losses.append(float(loss))
        except (TypeError, ValueError):  # the workload's mistake: say which call and what it gave
            raise TypeError(f"train_step() returned {shown(loss)} at step {step}; return the loss as one number "
                            "(a float, or a tensor of one element)") from None
    if step_times:
        rec.metric("time.train", "samples", "s", step_times)
        rec.metric("loss", "curve", "", losses)

    rec.data["phase"] = "infer"
    warmup = cls.warmup if args.warmup is None else args.warmup
    repeats = max(1, cls.repeats if args.repeats is None else args.repeats)
    first = None
    for _ in range(warmup):
        first = workload.infer(ctx)
    infer_times = []
    outputs = None
    for _ in range(repeats):
        start = time.perf_counter()
        outputs = workload.infer(ctx)
        helper.synchronize()
        infer_times.append(time.perf_counter() - start)
        if first is None:
            first = outputs
    rec.metric("time.infer", "samples", "s", infer_times)
    # what fails from here on (a MemoryError converting a huge output, a full disk) is the harness writing what
    # infer() returned, not infer() itself: the reason says "(in outputs)", as the compat child's does
    rec.data["phase"] = "outputs"
    try:
        rec.data["outputs"] = save_outputs(outputs, helper, rec.out / "outputs")
    except OSError as exc:
        full = no_space(exc, rec.out)
        if not full:
            raise
        # what was written goes, so that the result (timings, loss) still fits; the run that stores it is marked
        # incomplete (workflow._ingest), since a result without its outputs is nobody's baseline
        shutil.rmtree(rec.out / "outputs", ignore_errors=True)
        rec.data["info"]["outputs_lost"] = full
    rec.data["info"]["infer_repeatable"] = same_outputs(first, outputs, helper)

    rec.data["phase"] = "save"
    for fmt in (cls.formats if args.save else ()):
        rec.data["saved"].append(save_format(workload, cls, ctx, helper, fmt, rec.out / "saved"))


def format_reason(workload: Workload, cls: type[Workload], helper: Any, fmt: str, method: str) -> str | None:
    """Why `fmt` cannot be saved (`method` "save") or loaded ("load") here, or None.

    The workload's own `save`/`load` win over the helper for any format name: a workload that writes the method
    is asked alone (its optional `supports(fmt)`), and the helper only supplies formats to workloads that do
    not write it. A workload's `supports` may also narrow the helper's formats.
    """
    own = callable(getattr(workload, "supports", None))
    if overrides(cls, method):
        return workload.supports(fmt) if own else None
    reason = helper.supports(fmt)
    if reason:
        return f"{reason} (and the workload has no `{method}` of its own)"
    return workload.supports(fmt) if own else None


def save_format(workload: Workload, cls: type[Workload], ctx: Context, helper: Any, fmt: str, folder: Path) -> dict:
    """Save the model in one format; a format this version lacks is `skipped` with the reason."""
    folder.mkdir(parents=True, exist_ok=True)
    reason = format_reason(workload, cls, helper, fmt, "save")
    if reason:
        return {"format": fmt, "status": "skipped", "reason": str(reason)}
    path = folder / fmt
    try:
        (workload.save if overrides(cls, "save") else lambda c, f, p: helper.save(workload, c, f, p))(ctx, fmt, path)
    except Exception as exc:  # noqa: BLE001 - a failed save is recorded, the run goes on
        full = no_space(exc, folder)
        if full:  # what was written goes: the result must still fit
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            return {"format": fmt, "status": "failed", "reason": full}
        return {"format": fmt, "status": "failed", "reason": exception_text(exc),
                "traceback": failure_traceback(exc)}
    missing = nothing_saved(path)
    if missing:
        return {"format": fmt, "status": "failed", "reason": missing}
    return {"format": fmt, "status": "ok", "path": str(path.relative_to(folder.parent)),
            "unsafe": cls.format_unsafe(fmt, helper.unsafe_formats)}


def nothing_saved(path: Path) -> str:
    """Why a save that returned left nothing usable at `path` (what it wrote instead, if anything), or "".

    `np.savez(path)` writes `path.npz`, `torch.save` to a folder path fails elsewhere: a save that writes beside
    the path it was given used to be recorded `ok`, then dropped, so compat later found no models.
    """
    if path.is_file() or (path.is_dir() and any(path.iterdir())):
        return ""
    what = "an empty folder" if path.is_dir() else "nothing"
    near = sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name) and p != path)
    instead = f"; found {', '.join(near)} instead" if near else ""
    return (f"save({path.name!r}) returned but left {what} at the path it was given{instead}; a save must write "
            "exactly at that path (a file or a folder), e.g. np.savez(open(path, 'wb'), ...) rather than "
            "np.savez(path)")


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_ranks(args: argparse.Namespace, world_size: int, port: int, ranks: range) -> list[subprocess.Popen]:
    """Start this node's other ranks (`ranks`) as fresh copies of this process, which leads the node's ranks
    and reports for them (rank 0 reports for all)."""
    procs = []
    for rank in ranks:
        rank_out = Path(args.out) / f"rank-{rank}"
        cmd = [sys.executable, "-m", "modelci.workload.child", *sys.argv[1:], "--rank", str(rank),
               "--world-size", str(world_size), "--master-port", str(port), "--out", str(rank_out)]
        log = open(Path(args.out) / f"rank-{rank}.log", "wb")  # noqa: SIM115 - closed when the rank ends
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
    return procs


class ForkedRank:
    """A rank forked from rank 0, with the part of Popen's interface that `join_ranks` uses."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code (negative: a signal); subprocess.TimeoutExpired after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG if deadline is not None else 0)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"rank {self.pid}", timeout)
            else:
                time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the rank."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def fork_hazard() -> str:
    """Why ranks cannot be forked from this process now, or "" when they can.

    A fork copies only the calling thread, so a lock held by another thread would stay locked in the rank; a
    GPU runtime already initialised here cannot be used by a forked rank (NCCL needs a context of its own).
    """
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return f"no fork on {sys.platform}"
    if not os.path.isdir("/proc/self/task"):
        return "the thread count cannot be read (/proc)"
    threads = thread_count()
    if threads > 1:
        return f"this process runs {threads} threads"
    return framework_hazard()


def fork_ranks(args: argparse.Namespace, ranks_to_fork: range) -> tuple[list[ForkedRank], int]:
    """Fork this node's other ranks (`ranks_to_fork`) from this process, right after the prologue, so that each
    starts in the state a fresh rank reaches after its own import, seeding and determinism flags (a fresh rank
    imported torch again, 3 s of a 2-rank workload). Returns (the ranks, 0) in the node's first rank, and
    ([], rank) in a forked rank, whose stdout and stderr then go to `rank-<rank>.log`, as a spawned rank's do.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    ranks = []
    for rank in ranks_to_fork:
        pid = os.fork()
        if pid == 0:
            log = os.open(Path(args.out) / f"rank-{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            for fd in (1, 2):
                os.dup2(log, fd)
            os.close(log)
            return [], rank
        ranks.append(ForkedRank(pid))
    return ranks, 0


def join_ranks(procs: list[subprocess.Popen] | list[ForkedRank], out: Path, rec: Recorder, first: int = 1) -> None:
    """Wait for this node's other ranks (numbered from `first`); a rank that failed or crashed makes the whole
    result fail."""
    for rank, proc in enumerate(procs, first):
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        result = out / f"rank-{rank}" / "result.json"
        status = json.loads(result.read_text())["status"] if result.exists() else None
        if rec.data["status"] == "ok" and (code != 0 or status not in ("ok", None)):
            log = (out / f"rank-{rank}.log").read_text(errors="replace")[-2000:]
            if status not in ("ok", None):
                reason = json.loads(result.read_text()).get("reason") or status
            else:
                ended = f"was killed by {signal_name(-code)}" if code < 0 else f"exited with code {code}"
                reason = f"reported {status}, then {ended}" if status else ended
            rec.data.update(status="failed", reason=f"rank {rank}: {reason}", traceback=log)


class Placement:
    """Where one process of a workload stands among its ranks: `nodes` machines with `devices` ranks each.

    Node K holds the ranks K*devices .. K*devices + devices - 1; the first of them leads the node: it starts the
    others and reports for them. Rank 0 (node 0's leader) reports for the workload. The ranks meet at
    `master_addr:master_port`, on rank 0's node: 127.0.0.1 and a free port when there is one node, the address
    the executor gives (`--master-addr`, `--master-port`) when there are several.
    """

    def __init__(self, args: argparse.Namespace, cls: type[Workload]):
        self.devices = max(1, int(cls.devices))
        self.nodes = args.nodes or max(1, int(getattr(cls, "nodes", 1)))
        self.node_rank = args.node_rank
        if not 0 <= self.node_rank < self.nodes:
            raise ValueError(f"--node-rank {self.node_rank} is not a node of a {self.nodes}-node workload")
        self.world_size = args.world_size or self.nodes * self.devices
        self.leader = self.node_rank * self.devices
        self.rank = self.leader if args.rank is None else args.rank
        self.local_rank = self.rank - self.leader
        self.master_addr = args.master_addr or "127.0.0.1"
        self.master_port = args.master_port
        self.node_address = args.node_address
        if self.nodes > 1 and not (args.master_addr and args.master_port):
            raise ValueError(
                f"a workload with nodes = {self.nodes} needs the rendezvous address of rank 0's node "
                "(--master-addr, --master-port), which a cluster executor gives; run it with executor = \"ray\"")

    def other_local_ranks(self) -> range:
        """The ranks this process starts: the rest of its node's, when it leads the node."""
        return range(self.leader + 1, self.leader + self.devices) if self.local_rank == 0 else range(0)

    def info(self) -> dict[str, Any]:
        """What a result records of the placement (for `nodes > 1`)."""
        return {"node_rank": self.node_rank, "master_addr": self.master_addr, "master_port": self.master_port,
                "node_address": self.node_address}


#: the workload's method running in each phase of `run_phases` and of compat_child's jobs, for a reason that names
#: the call
PHASE_CALLS = {"setup": "setup()", "train": "train_step()", "infer": "infer()", "save": "save()",
               "inputs": "example_inputs()", "load": "load()", "outputs": "an output of infer() being converted"}


def exit_reason(exc: BaseException, phase: str) -> str:
    """The reason of a workload that raised a BaseException that is not an Exception (`sys.exit(0)`, `raise
    KeyboardInterrupt`): the call and what it raised.

    The harness never stops a child this way: it ends a child with SIGKILL (its supervisor with SIGTERM, whose
    default action ends the process without raising), and a child runs in a session of its own, out of reach of
    the terminal's Ctrl-C. So such an exception is the workload's own, and a `failed` result with its traceback,
    as any exception in a workload is; left to end the process, it gave a `crashed` result with no reason.
    """
    call = PHASE_CALLS.get(phase, "the workload (importing or preparing it)")
    return f"{call} raised {exception_repr(exc)}, which would end the process; raise an ordinary exception to fail"


def skip_reason(exc: SkipWorkload) -> str:
    """The reason of a skipped workload: what SkipWorkload says, safe against a message that cannot be shown."""
    return exception_message(exc) or "skipped by the workload"


def execute(args: argparse.Namespace) -> int:
    """Run one workload and write result.json; exceptions become `failed` (or `skipped`) results.

    A workload with `devices = N` runs as N cooperating processes (torch.distributed with gloo on CPU):
    this process is rank 0 and starts the others; rank 0 reports. The other ranks are forks of this process
    taken after the prologue (`--ranks fork`, the default, where forking is safe), or fresh processes.
    A workload with `nodes = M` runs this way on each of M nodes, one such process per node started by the
    executor with `--node-rank` and the rendezvous address of rank 0's node (`Placement`); each node's first
    rank writes its node's result, and rank 0's is the workload's.
    """
    suites = parse_suites(args.suite)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rec = Recorder(out, args.workload)
    rec.data["info"]["python"] = platform.python_version()
    ranks: list[subprocess.Popen] | list[ForkedRank] = []
    forked_rank = 0
    helper = None
    try:
        cls, path = find_class(suites, args.workload, args.file)
        helper = get_helper(cls.framework)
        helper.seed(args.seed)
        helper.set_determinism(True)
        helper.warm_up()
        freeze_heap()
        reset_peak_rss()
        place = Placement(args, cls)
        world_size = place.world_size
        if place.nodes > 1:
            rec.data["info"].update(place.info())
        others = place.other_local_ranks()
        if others:
            place.master_port = place.master_port or free_port()
            hazard = fork_hazard() if args.ranks == "fork" else "--ranks spawn"
            rec.data["info"]["ranks"] = "spawn" if hazard else "fork"
            if hazard:
                rec.data["info"]["ranks_reason"] = hazard
                ranks = start_ranks(args, world_size, place.master_port, others)
            else:
                ranks, forked_rank = fork_ranks(args, others)
            if forked_rank:  # this process is now rank `forked_rank`: it reports into its own folder, as a fresh one
                place.rank, place.local_rank = forked_rank, forked_rank - place.leader
                args.save, ranks = False, []
                out = Path(args.out) / f"rank-{forked_rank}"
                rec = Recorder(out, args.workload)  # first: nothing this rank records may land in rank 0's files
                rec.data["info"]["python"] = platform.python_version()
                out.mkdir(parents=True, exist_ok=True)
        device = helper.default_device(place.local_rank) if args.device == "auto" else args.device
        rec.data["info"]["device"] = device
        ctx = Context(seed=args.seed, device=device, scratch=out / "scratch", rank=place.rank,
                      world_size=world_size, local_rank=place.local_rank, node_rank=place.node_rank)
        ctx.scratch.mkdir(exist_ok=True)
        if world_size > 1:
            helper.init_distributed(place.rank, world_size, place.master_addr, place.master_port,
                                    local_address=place.node_address)
            rec.data["info"]["world_size"] = world_size
        run_phases(cls(), cls, ctx, helper, rec, args)
        for name, values in ctx.metrics.items():
            rec.metric(name, "samples", "", values)
        rec.data["info"]["versions"] = helper.versions()
        peak_device = helper.peak_device_memory()
        if peak_device is not None:
            rec.metric("mem.peak_device", "samples", "bytes", [peak_device])
    except SkipWorkload as exc:
        rec.data.update(status="skipped", reason=skip_reason(exc))
    except Exception as exc:  # noqa: BLE001 - any exception in the workload is a `failed` result
        rec.data.update(status="failed", reason=f"{exception_text(exc)} (in {rec.data['phase']})")
        rec.data["traceback"] = failure_traceback(exc)
    except BaseException as exc:  # noqa: BLE001 - the workload's own SystemExit or KeyboardInterrupt, see exit_reason
        rec.data.update(status="failed", reason=f"{exit_reason(exc, rec.data['phase'])} (in {rec.data['phase']})")
        rec.data["traceback"] = failure_traceback(exc)
    if helper is not None and rec.data["info"].get("world_size"):
        try:
            helper.shutdown_distributed()
        except Exception:  # noqa: BLE001 - a group torn down by a failed rank must not hide that failure
            pass
    if ranks:
        join_ranks(ranks, out, rec, first=place.leader + 1)
    # the parts first: the peak (VmHWM) only grows, so read after them it covers them, whatever recording the
    # metric allocates in between
    rec.data["info"]["rss_end"] = rss_parts()
    rec.metric("mem.peak_rss", "samples", "bytes", [peak_rss_bytes()])
    rec.data["info"]["modules"] = module_info(sorted({*frameworks.framework_modules(), *args.report_module}))
    rec.write()
    if forked_rank or rec.data["info"].get("world_size"):
        # a forked rank must not return into rank 0's caller, nor run the exit handlers rank 0 registered; and a
        # rank of a process group skips interpreter finalization, where a framework's communication threads
        # still alive can abort the process (SIGABRT) after its result is written, which would turn a finished
        # run into a crash
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


# -- command line ---------------------------------------------------------------------------------


def parse_suites(values: list[str]) -> dict[str, Path]:
    """`NAME=DIR` arguments to an ordered mapping."""
    suites = {}
    for value in values:
        # the folder is absolute, so the first "=/" ends the name, which may hold "=" itself (`bs=32`)
        cut = value.find("=" + os.sep)
        name, sep, folder = (value[:cut], "=", value[cut + 1:]) if cut > 0 else value.partition("=")
        if not sep:
            raise SystemExit(f"--suite expects NAME=DIR, got {value!r}")
        suites[name] = Path(folder)
    return suites


def drop_working_directory() -> None:
    """Take the working directory off sys.path, where `python -m` put it first.

    Children run in the user's project folder (workloads may read files relative to it), and a `numpy.py`,
    a `torch/` folder or a `_common.py` there must not hide the environment's packages or a suite's own
    helper. Done at the start of each entry point (child, worker, compat child), before anything else is
    imported; `-P` would do the same but needs Python 3.11 in the environment under test.
    """
    cwd = os.getcwd()
    if sys.path and sys.path[0] in ("", ".", cwd):
        del sys.path[0]


def main(argv: list[str] | None = None) -> int:
    """Dispatch the `list` and `run` entry points."""
    drop_working_directory()
    lifeline.from_environment()  # a spawned child dies with the harness (a forked one with its worker)
    parser = argparse.ArgumentParser(prog="modelci.workload.child")
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list")
    listing.add_argument("--suite", action="append", default=[])
    listing.add_argument("--out", required=True)
    run = sub.add_parser("run")
    run.add_argument("--suite", action="append", default=[])
    run.add_argument("--workload", required=True)
    run.add_argument("--file", help="the suite file that defines the workload")
    run.add_argument("--out", required=True)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--device", default="auto", help="cpu, cuda:0, … (default: an accelerator when present)")
    run.add_argument("--repeats", type=int, default=None)
    run.add_argument("--warmup", type=int, default=None)
    run.add_argument("--no-save", dest="save", action="store_false")
    run.add_argument("--report-module", action="append", default=[])
    run.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    run.add_argument("--world-size", type=int, default=0, help=argparse.SUPPRESS)
    run.add_argument("--master-port", type=int, default=0,
                     help="the rendezvous port on rank 0's node (default: a free one, with one node)")
    run.add_argument("--nodes", type=int, default=0, help="nodes the ranks span (default: the workload's `nodes`)")
    run.add_argument("--node-rank", type=int, default=0, help="which node this is (0: rank 0's node)")
    run.add_argument("--master-addr", default="", help="rank 0's node address, where the ranks meet (nodes > 1)")
    run.add_argument("--node-address", default="",
                     help="this node's own address, the one its ranks' collectives bind to (nodes > 1)")
    run.add_argument("--ranks", choices=("fork", "spawn"), default="fork",
                     help="how rank 0 starts the other ranks of a `devices > 1` workload: forked from itself after "
                          "the prologue where that is safe (default), or as fresh processes")
    args = parser.parse_args(argv)
    if args.command == "run" and (args.rank or args.node_rank):
        args.save = False  # rank 0 reports and saves for the group
    if args.command == "list":
        found = discover(parse_suites(args.suite))
        Path(args.out).write_text(json.dumps(found, indent=1))
        return 0
    return execute(args)


if __name__ == "__main__":
    sys.exit(main())
