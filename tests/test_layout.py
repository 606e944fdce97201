"""The package's layout has no import cycles: the steps that `run`, `compare`, `calibrate`, `compat` and `bisect`
share live below them (`modelci.steps`), so nothing imports `workflow` back.

The graph is read from the source with `ast`, not by importing: every `import` counts, at module level and
inside functions alike. A function-local import defers the cost of a heavy module (SQLAlchemy, scipy); it must
not be a way to hide a cycle, so it is an edge here too.

The tree is also linted (ruff: unused imports, undefined names, lines over 120 characters).
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

from modelci.records import ResultInfo

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "modelci"


def modules(root: Path = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__)."""
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def imports(known: dict[str, tuple[Path, bool]]) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports anywhere in its source (a name imported from a package
    that is a submodule counts as that submodule; a module importing its own package's names counts too)."""
    def owner(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, (path, package) in known.items():
        here = name if package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[:len(here.split(".")) - node.level + 1]
                    base = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    base = node.module or ""
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
            else:
                continue
            for target in targets:
                found = owner(target)
                if found and found != name:
                    edges[name].add(found)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_package_has_no_import_cycle():
    edges = imports(modules())
    assert "modelci.workflow" in edges and "modelci.steps" in edges["modelci.workflow"]  # the graph is read
    found = cycles(edges)
    assert not found, "import cycles among modelci's modules (each line: modules that import each other " \
                      "round a circle, with what each imports of the others):\n" + "\n".join(
        ", ".join(f"{m} -> {sorted(edges[m] & set(c))}" for m in c) for c in found)


def test_the_cycle_check_finds_a_cycle_hidden_in_a_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def later():\n    from pkg.c import thing\n")
    (package / "c.py").write_text("import pkg.a\nthing = 1\n")
    (package / "d.py").write_text("from . import a\n")
    edges = imports(modules(package))
    assert edges["pkg.d"] == {"pkg.a"}
    assert cycles(edges) == [["pkg.a", "pkg.b", "pkg.c"]]


#: how a step writes or reads a key of a result's info: `result.info["k"]`, `.info.get("k")`,
#: `.info.update(k=...)`, the child's `rec.data["info"]["k"]`, and `info={"k": ...}` given to a Result
INFO_KEY = re.compile(r'\.info\[\s*"(\w+)"|\.info\.get\(\s*"(\w+)"|data\["info"\]\[\s*"(\w+)"'
                      r'|data\["info"\]\.get\(\s*"(\w+)"|\binfo\["(\w+)"\]|info=\{"(\w+)"')
INFO_UPDATE = re.compile(r"\.info\.update\(([^)]*)\)")


def test_every_key_of_a_result_info_is_declared():
    declared = set(ResultInfo.__annotations__)
    used: dict[str, str] = {}
    for path in PACKAGE.rglob("*.py"):
        if "zoo" in path.relative_to(PACKAGE).parts:  # the zoo's own `info` variables are not results'
            continue
        text = path.read_text()
        for match in INFO_KEY.finditer(text):
            used.setdefault(next(g for g in match.groups() if g), path.name)
        for match in INFO_UPDATE.finditer(text):
            for key in re.findall(r"(\w+)=", match.group(1)):
                used.setdefault(key, path.name)
    assert {"modules", "saved", "settings", "isolation", "worker_rss"} <= set(used)  # the scan finds them
    undeclared = {key: where for key, where in used.items() if key not in declared}
    assert not undeclared, f"keys of Result.info not declared in records.ResultInfo: {undeclared}"


def test_the_limits_checked_where_values_are_given_are_the_historys_column_lengths():
    """Each value a user or a workload gives is checked against the column that stores it where it is given (the
    child cannot import SQLAlchemy, and config.load must not): those limits are copies of the schema's, and a
    copy that drifts above its column lets a value through that the history then stores cut (store.schema.String),
    a workload or runner named one way in the console and another in the history."""
    from modelci import config, steps, targets
    from modelci.commands import alarms
    from modelci.store.alarms_schema import AlarmEventRow, AlarmRow
    from modelci.store.schema import MetricRow, OutputRow, ResultRow, RunRow, TargetRow
    from modelci.workload import api, child

    def length(column) -> int:
        return column.property.columns[0].type.length

    assert config.RUNNER_MAX == length(RunRow.runner) == length(AlarmRow.runner)
    assert alarms.WHO_MAX == length(AlarmEventRow.by) == length(AlarmRow.acknowledged_by)
    assert child.LABEL_MAX == length(ResultRow.framework) == length(ResultRow.domain)
    assert api.METRIC_NAME_MAX == length(MetricRow.name) == length(OutputRow.name)
    assert steps.WORKLOAD_ID_MAX == length(ResultRow.workload) == length(AlarmRow.workload)
    assert steps.SUITE_NAME_MAX + 1 + child.NAME_MAX <= steps.WORKLOAD_ID_MAX  # suite/name fits
    assert (targets.NAME_MAX, targets.VERSION_MAX) == (length(TargetRow.name), length(TargetRow.version))


def test_the_repeats_option_and_a_workloads_own_repeats_have_one_bound():
    """`repeats` in modelci.toml or --repeats replaces a workload's own: a bound on one and not the other would let
    the same billion timed calls in by the other door."""
    from modelci import config
    from modelci.workload import child

    assert config.OPTION_BY_NAME["repeats"].maximum == child.WHOLE_NUMBER_MAX


ROOT = PACKAGE.parent.parent


def lint(*paths: str | Path) -> subprocess.CompletedProcess:
    """ruff with the project's settings (pyproject.toml: pyflakes and the 120-character lines)."""
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                           "--config", str(ROOT / "pyproject.toml"), *map(str, paths)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_tree_has_no_unused_import_undefined_name_or_long_line():
    result = lint("src", "tests", "benchmarks", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_lint_finds_an_unused_import_an_undefined_name_and_a_long_line(tmp_path):
    source = tmp_path / "sloppy.py"
    source.write_text("import os\n\n\ndef f():\n    return missing\n\n\nLONG = '" + "x" * 120 + "'\n")
    result = lint(source)
    assert result.returncode == 1
    assert {"F401", "F821", "E501"} <= set(re.findall(r"\b[EF]\d{3}\b", result.stdout)), result.stdout
