"""Configuration: `modelci.toml` or `[tool.modelci]` in pyproject.toml, `MODELCI_*` variables, CLI flags.

Each option is declared once, as a typed field of the frozen `Config` with its default, range and help
(docs/design.md: nox `_option_set`); its variable is `MODELCI_<NAME>`.
Precedence is CLI > environment > file > default, and `Config.sources` says where each value came from.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import math
import os
import re
import socket
import sys
import typing
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Callable

from modelci.errors import UserError, short_number

import tomllib


@dataclass(frozen=True)
class Option:
    """One top-level option, as `Config` declares it: its name (the config key), type, default, help, and the
    values it may take. Read from Config's fields (`OPTIONS`), never written by hand."""

    name: str
    type: type
    default: Any
    help: str
    #: the values it may take, when it is a choice (empty: any value of its type)
    choices: tuple = ()
    #: the smallest value a number may take (None: no bound), and whether that bound itself is refused
    minimum: float | None = None
    above: bool = False
    #: the largest value a number may take (None: no bound)
    maximum: float | None = None

    @property
    def env(self) -> str:
        """The environment variable that sets it."""
        return "MODELCI_" + self.name.upper()


def option(default: Any, help: str, *, choices: tuple = (), minimum: float | None = None,
           above: bool = False, maximum: float | None = None) -> Any:
    """Declare a top-level option as a field of `Config`: its default, help and range; its type is the field's.
    `modelci config`, the starter file, the `MODELCI_*` variables and the checks of every value come from it."""
    metadata = {"help": help, "choices": choices, "minimum": minimum, "above": above, "maximum": maximum}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Config:
    """The resolved configuration: each top-level option a typed field, declared once here with its default,
    range and help, and read one way (`config.threads`). `sources[name]` is "default", "file:PATH", "env:VAR"
    or "cli". Frozen: a changed setting is a new Config (`dataclasses.replace`)."""

    db: str = option(".modelci/history.db", "history database: a SQLite file path or a SQLAlchemy URL")
    artifacts: str = option(".modelci/artifacts", "artifact store: a folder or any fsspec URL (s3://bucket/prefix)")
    artifacts_options: dict[str, Any] = option(
        {}, "fsspec storage options of the artifact store: a TOML table, or JSON in the variable "
            '(e.g. {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}, or {"anon": true})')
    artifacts_readonly: bool = option(False, "open the artifact store read-only (e.g. a public bucket): writes are "
                                             "refused, compat still reads from it")
    cache_dir: str = option("~/.cache/modelci", "where environments and built wheels are cached")
    runner: str = option(socket.gethostname(), "runner label stored with every run (e.g. ci-cpu)")
    #: at most a year: a timeout past what the OS's clocks and select() hold (about 9e9 s) failed the run with a
    #: traceback when the first workload started; a year is "never" for a workload
    timeout: float = option(1800.0, "seconds one workload may take before it is killed and marked timeout",
                            minimum=0, above=True, maximum=365 * 24 * 3600)
    #: at most 2**32 - 1: the seed is also each workload's PYTHONHASHSEED, which Python refuses beyond that (every
    #: workload would crash at start, and the run would read as a regression)
    seed: int = option(0, "seed handed to every workload", minimum=0, maximum=2**32 - 1)
    #: at most what a workload's own `repeats` may be (workload.child.WHOLE_NUMBER_MAX; a test holds them equal)
    repeats: int = option(0, "timed inference repeats per workload (0: the workload's own setting)", minimum=0,
                          maximum=100_000)
    python: str = option(sys.executable, "base interpreter for the environments")
    #: a git target's build (uv build, or the --build command) is ended past this, with all it started; building
    #: a large framework from source (PyTorch: hours) needs more than the hour of the default
    build_timeout: float = option(3600.0, "seconds a git commit's build may take before it is ended, with every "
                                          "process it started, and the commit counts as not built",
                                  minimum=0, above=True, maximum=7 * 24 * 3600)
    threads: int = option(1, "BLAS/OpenMP threads per workload (0: leave the variables as they are); a fixed count "
                             "keeps timings comparable and numerics reproducible on a shared runner", minimum=0)
    suites: list[str] = option([], "default suites when --suite is not given (folders or zoo:NAME)")
    isolation: str = option("fork", "how each workload gets a fresh process: fork (one warm worker per environment "
                                    "imports the framework once and forks a child per workload; spawn where forking "
                                    "is unsafe) or spawn (a new interpreter per workload)", choices=("fork", "spawn"))
    executor: str = option("local", "where the workloads run: local (this machine) or ray (the nodes of a Ray "
                                    "cluster, `pip install 'modelci[ray]'`; docs/ray.md)", choices=("local", "ray"))
    ray_address: str = option("", "the Ray cluster of `executor = \"ray\"`: the head node's HOST:PORT (or auto); "
                                  "empty: RAY_ADDRESS, else a Ray instance started on this machine for the command")
    ray_retries: int = option(0, "with `executor = \"ray\"`: how many times a workload whose node died (or whose Ray "
                                 "worker was killed) runs again, on a node that can place it (0: it is an error)",
                              minimum=0)
    progress_every: float = option(30.0, "seconds between the `still ...` lines of a long step (an environment "
                                         "build, a workload) when the output is not a terminal", minimum=0,
                                   above=True)

    # --- the tables of the file, already checked ---------------------------------------------------------
    sources: dict[str, str] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)
    overrides: list[dict[str, Any]] = field(default_factory=list)
    #: [[policy]] (per-metric KPI objects), [[allow]], [[notify]] and [alarms]: see modelci.alarms.settings
    policies: list[dict[str, Any]] = field(default_factory=list)
    allow: list[dict[str, Any]] = field(default_factory=list)
    notify: list[dict[str, Any]] = field(default_factory=list)
    alarms: dict[str, Any] = field(default_factory=dict)
    #: [env]: `constraints` (absolute paths) and `platform_overrides` (platform glob -> absolute path); envs.constraints
    env: dict[str, Any] = field(default_factory=dict)
    file: Path | None = None
    root: Path = field(default_factory=Path.cwd)
    #: a pyproject.toml beside the modelci.toml in use whose [tool.modelci] table is therefore ignored (the
    #: command says so: an edit there would otherwise change nothing, silently)
    ignored: Path | None = None
    #: [[allow]] entries past their date, said by a command that judges nothing (`load(lenient=True)`)
    expired_allow: list[str] = field(default_factory=list)
    #: the options whose value in the config file holds a password (a URL's `user:secret@`, a `password=`): the
    #: command says where to give it instead, since the file is committed and read by whoever reads the repository
    secrets_in_file: list[str] = field(default_factory=list)

    def policy_for(self, workload: str) -> Callable[[str], Any]:
        """A function metric -> Policy for one workload: the [checks] defaults, then matching overrides and
        [[policy]] entries in order; a metric under an [[allow]] entry is report-only (active = false)."""
        from modelci.alarms.settings import allow_entry
        from modelci.checks import Policy

        def policy(metric: str) -> Any:
            settings = dict(self.checks)
            for entry in [*self.overrides, *self.policies]:
                if fnmatch.fnmatchcase(workload, entry.get("workload", "*")) and fnmatch.fnmatchcase(
                    metric, entry.get("metric", "*")
                ):
                    settings.update({k: v for k, v in entry.items() if k not in ("workload", "metric", "_entry")})
            if allow_entry(self.allow, workload, metric) is not None:
                settings["active"] = False
            return Policy(**settings)

        return policy


def _options() -> list[Option]:
    hints = typing.get_type_hints(Config)
    found = []
    for f in dataclasses.fields(Config):
        if "help" not in f.metadata:
            continue
        kind = typing.get_origin(hints[f.name]) or hints[f.name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        found.append(Option(f.name, kind, default, f.metadata["help"], f.metadata["choices"], f.metadata["minimum"],
                            f.metadata["above"], f.metadata["maximum"]))
    return found


#: every top-level option, in declaration order, read from Config's fields
OPTIONS = _options()
OPTION_BY_NAME = {o.name: o for o in OPTIONS}
PATH_OPTIONS = ("db", "artifacts")


def find_file(start: Path) -> tuple[Path | None, dict[str, Any]]:
    """The config file in `start`: modelci.toml, else pyproject.toml with a [tool.modelci] table."""
    for name in CONFIG_FILES:
        path = start / name
        if path.is_file():
            data = read_toml(path)
            if name == "modelci.toml":
                return path, data
            table = tool_table(data, path)
            if table is not None:
                return path, table
    return None, {}


#: the files `find_file` looks for, the first that configures modelci winning
CONFIG_FILES = ("modelci.toml", "pyproject.toml")


def find_project_file(cwd: Path) -> tuple[Path | None, dict[str, Any]]:
    """The config file of the project `cwd` is in: `find_file` in `cwd`, else in each folder above it up to the
    root of the git repository that holds it, as git finds its repository. A command run from a subfolder of the
    project (a CI step's working directory) read no config: it said "set `suites` in modelci.toml" beside a file
    that does, or made a new, empty history there and passed against it. Outside a repository only `cwd` is
    read, so that a stray modelci.toml in a folder above (a home folder, /tmp) configures nothing by surprise."""
    cwd = cwd.resolve()
    top = next((folder for folder in (cwd, *cwd.parents) if (folder / ".git").exists()), cwd)
    for folder in (cwd, *cwd.parents):
        found = find_file(folder)
        if found[0] is not None or folder == top:
            return found
    return None, {}


def shadowed(path: Path | None) -> Path | None:
    """The pyproject.toml beside `path` (a modelci.toml) when it has a [tool.modelci] table, which `path` then
    wins over; None otherwise, and when that pyproject.toml cannot be read (it configures nothing then)."""
    if path is None or path.name != CONFIG_FILES[0]:
        return None
    other = path.parent / CONFIG_FILES[1]
    if not other.is_file():
        return None
    try:
        return other if tool_table(read_toml(other), other) is not None else None
    except UserError:
        return None


def tool_table(data: dict[str, Any], path: Path) -> dict[str, Any] | None:
    """The [tool.modelci] table of a pyproject.toml, None when it has none; a `tool` or `tool.modelci` that is
    not a table is a UserError naming it."""
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise UserError(f"{path}: 'tool' must be a table ([tool.modelci]), got {tool!r}")
    if "modelci" not in tool:
        return None
    if not isinstance(tool["modelci"], dict):
        raise UserError(f"{path}: 'tool.modelci' must be a table ([tool.modelci]), got {tool['modelci']!r}")
    return tool["modelci"]


#: the longest runner label the history stores
RUNNER_MAX = 200


def absolute_path(value: str, base: Path, where: str) -> str:
    """`value` (`~` and `~user` expanded) made absolute against `base`; `where` names the setting in a UserError."""
    return str((base / _home(value, where)).resolve())


def _home(value: str, where: str) -> str:
    """`value` with `~`/`~user` expanded; a UserError, not a RuntimeError, when that user (or HOME) is unknown."""
    try:
        return str(Path(value).expanduser())
    except RuntimeError:
        raise UserError(f"{where}: {value.split('/', 1)[0]} is no user's home folder here; give the folder "
                        "itself") from None


def read_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; a syntax error names the file and the line."""
    try:
        # utf-8-sig: an editor's byte-order mark is no syntax error at line 1, column 1
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}); a TOML file must be UTF-8: fix the file or "
                        "pass --config") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML ({exc}); fix the file or pass --config") from None
    except RecursionError:  # tomllib parses nested arrays and tables by recursion
        raise UserError(f"{path}: its arrays or tables are nested too deeply to read; fix the file or pass "
                        "--config") from None
    except OSError as exc:
        raise UserError(f"cannot read config file {path}: {exc.strerror}") from None


def load(cli: dict[str, Any] | None = None, config_file: str | Path | None = None, cwd: Path | None = None,
         environ: dict[str, str] | None = None, today: date | None = None, lenient: bool = False) -> Config:
    """Resolve the configuration with precedence CLI > environment > file > default. `today` is the date
    [[allow]] entries expire against (default: the local date). `lenient`: an expired [[allow]] entry is kept in
    `expired_allow` rather than refused, for a command that judges nothing (listing or acknowledging alarms,
    the dashboard), which an expired entry must not stop when someone needs it to look at the regression."""
    cwd = cwd or Path.cwd()
    environ = os.environ if environ is None else environ
    if config_file:
        path: Path | None = Path(config_file)
        if path.is_dir():
            raise UserError(f"config file {config_file} is a folder; pass the modelci.toml (or pyproject.toml) in it")
        if not path.exists():
            raise UserError(f"config file {config_file} does not exist")
        if not path.is_file():  # /dev/null, a FIFO: reading it would give nothing, or wait for ever
            raise UserError(f"config file {config_file} is not a regular file; pass the modelci.toml (or "
                            "pyproject.toml) itself")
        data = read_toml(path)
        if path.name == "pyproject.toml":
            table = tool_table(data, path)
            if table is None:  # named on purpose: its defaults would pass for the settings asked for
                raise UserError(f"config file {config_file} has no [tool.modelci] table; add one, or pass the "
                                "project's modelci.toml")
            data = table
    else:
        path, data = find_project_file(cwd)
    where = str(path) if path else "config"
    root = path.parent.resolve() if path else cwd.resolve()

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for option in OPTIONS:
        values[option.name], sources[option.name] = option.default, "default"
    known = set(OPTION_BY_NAME) | {"checks", "overrides", "policy", "allow", "notify", "alarms", "env"}
    for key, value in data.items():
        if key not in known:
            raise UserError(f"{where}: unknown key {key!r}; known keys: {', '.join(sorted(known))}")
        if key in OPTION_BY_NAME:
            values[key], sources[key] = (coerce(OPTION_BY_NAME[key], value, f"{where}: key {key!r}", typed=True),
                                         f"file:{path}")
    for option in OPTIONS:
        if option.env in environ and environ[option.env] != "":
            raw = environ[option.env]
            value = raw.split(",") if option.type is list else raw
            values[option.name] = coerce(option, value, f"environment variable {option.env}")
            sources[option.name] = f"env:{option.env}"
    for key, value in (cli or {}).items():
        if value is not None:
            values[key], sources[key] = coerce(OPTION_BY_NAME[key], value, f"option --{key.replace('_', '-')}"), "cli"
    runner = values["runner"]
    if not runner.strip() or not runner.isprintable():
        raise UserError(f"runner {runner!r} (from {sources['runner']}) must be a non-blank label on one line, such "
                        "as ci-cpu: runs are grouped and compared by it")
    if len(runner) > RUNNER_MAX:  # the history's column: PostgreSQL refused the run after every workload ran
        raise UserError(f"runner {runner[:40]!r}... (from {sources['runner']}) is {len(runner)} characters long; "
                        f"the most is {RUNNER_MAX}")
    for key in (*PATH_OPTIONS, "cache_dir"):
        if not values[key].strip():  # "" meant the project folder itself, " " a file named with spaces there
            raise UserError(f"{key} = {values[key]!r} (from {sources[key]}) is blank; give a path, or leave it out "
                            "for the default")
    _refuse_conninfo(values["db"], sources["db"])
    for key in PATH_OPTIONS:
        if "://" not in values[key]:
            # a path in the file (or the default) is the project's, relative to the file's folder; one given on
            # the command line or in the environment is the user's, relative to where the command runs, as
            # every other command-line path is
            base = cwd.resolve() if sources[key] == "cli" or sources[key].startswith("env:") else root
            values[key] = absolute_path(values[key], base, f"{key} = {values[key]!r} (from {sources[key]})")
    values["cache_dir"] = _home(values["cache_dir"], f"cache_dir = {values['cache_dir']!r} (from "
                                                     f"{sources['cache_dir']})")
    checks = validate_policy(data.get("checks", {}), f"{where}: [checks]")
    overrides = validate_overrides(data.get("overrides", []), where)
    from modelci.alarms import settings as alarm_settings
    from modelci.records import redacted

    expired: list[str] = []
    secrets = [key for key, value in values.items() if sources[key].startswith("file:") and isinstance(value, str)
               and redacted(value) != value]
    return Config(**values, sources=sources, checks=checks, overrides=overrides, file=path, root=root,
                  ignored=None if config_file else shadowed(path), secrets_in_file=secrets,
                  env=validate_env(data.get("env", {}), f"{where}: [env]", root),
                  policies=alarm_settings.validate_policy_entries(data.get("policy", []), where, validate_policy),
                  allow=alarm_settings.validate_allow(data.get("allow", []), where, today or date.today(),
                                                      expired if lenient else None),
                  expired_allow=expired,
                  notify=alarm_settings.validate_notify(data.get("notify", []), where),
                  alarms=alarm_settings.validate_alarm_settings(data.get("alarms", {}), where))


#: libpq's connection keywords (PostgreSQL 15's "Parameter Key Words"): what a keyword=value connection string
#: (`host=db port=5432 dbname=hist`) is made of
LIBPQ_KEYWORDS = frozenset("""
    host hostaddr port dbname user password passfile channel_binding connect_timeout client_encoding options
    application_name fallback_application_name keepalives keepalives_idle keepalives_interval keepalives_count
    tcp_user_timeout replication gssencmode sslmode requiressl sslcompression sslcert sslkey sslpassword sslrootcert
    sslcrl sslcrldir sslsni requirepeer ssl_min_protocol_version ssl_max_protocol_version krbsrvname gsslib
    service target_session_attrs
""".split())
#: one keyword=value pair of such a string; a value may be quoted ('a b', with \' and \\ inside)
_CONNINFO_PAIR = r"""(\w+)\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']*)"""
_CONNINFO = re.compile(rf"\s*{_CONNINFO_PAIR}(?:\s+{_CONNINFO_PAIR})*\s*")


def _refuse_conninfo(value: str, source: str) -> None:
    """Refuse a libpq keyword connection string given as `db`: without `://` it was taken for a SQLite file path,
    and a new history named after the whole string, its password included, was made in the current folder, which
    the run then passed on. What tells it from a file name: nothing but keyword=value pairs of libpq's keywords,
    two or more of them (separated by spaces), or one without a `/` (a file named `host=a/h.db` stays a path)."""
    if "://" in value or not _CONNINFO.fullmatch(value):
        return
    keys = re.findall(_CONNINFO_PAIR, value)
    if not set(keys) <= LIBPQ_KEYWORDS or (len(keys) == 1 and "/" in value):
        return
    # the keys alone: the value holds the password
    raise UserError(f"db (from {source}) is a libpq connection string ({' '.join(f'{k}=...' for k in keys)}), "
                    "which modelci does not read: give a URL such as postgresql://USER@HOST:PORT/DB, with the "
                    "password in PGPASSWORD or ~/.pgpass (write ./NAME for a SQLite file of that name)")


def coerce(option: Option, value: Any, where: str, typed: bool = False) -> Any:
    """Convert a value to the option's type, or raise a UserError naming where it came from.

    ``typed``: the value comes from TOML, which has numbers, booleans and tables of its own; a string there is
    refused, as the check settings refuse it (`timeout = "60"` is a typo for `timeout = 60`). Environment
    variables and flags are text, and are converted."""
    if typed and isinstance(value, str) and option.type in (int, float, bool, dict):
        written = {int: "an integer", float: "a number", bool: "true or false", dict: "a table"}[option.type]
        raise UserError(f"{where} must be {written}, got the string {value!r}: write it without quotes"
                        if option.type is not dict else f"{where} must be a table, got the string {value!r}")
    try:
        if option.type is dict:
            return _coerce_dict(value)
        if option.type is bool:
            return _coerce_bool(value)
        if option.type is list:
            if isinstance(value, str) or not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TypeError
            return list(value)
        if option.type is str:
            if not isinstance(value, str):
                raise TypeError
            if "\0" in value:  # a path or label cannot hold one; the OS refuses it, with a traceback
                raise UserError(f"{where} holds a NUL character (\\0), got {value!r}; remove it")
            if option.choices and value not in option.choices:
                raise UserError(f"{where} must be one of {', '.join(option.choices)}, got {value!r}")
            return value
        if isinstance(value, bool):
            raise TypeError
        if option.type is int and isinstance(value, float) and not value.is_integer():
            raise TypeError  # int(1.5) would quietly make it 1
        number = option.type(value)
    except OverflowError:  # an integer of hundreds of digits is no float
        raise UserError(f"{where} must be a finite number, got {short_number(value)}") from None
    except (TypeError, ValueError):
        raise UserError(f"{where} must be {_type_name(option.type)}, got {value!r}") from None
    return in_range(option, number, where)


def in_range(option: Option, number: Any, where: str) -> Any:
    """`number` when it is finite and within the option's bound; otherwise a UserError naming where it came from."""
    if isinstance(number, float) and not math.isfinite(number):
        raise UserError(f"{where} must be a finite number, got {number!r}")
    if option.minimum is not None and (number <= option.minimum if option.above else number < option.minimum):
        bound = f"greater than {option.minimum:g}" if option.above else f"{option.minimum:g} or more"
        raise UserError(f"{where} must be {bound}, got {number!r}")
    if option.maximum is not None and number > option.maximum:
        raise UserError(f"{where} must be {option.maximum:.15g} or less, got {number!r}")
    return number


def _coerce_dict(value: Any) -> dict[str, Any]:
    """A table from TOML, or a JSON object from an environment variable or a flag."""
    if isinstance(value, str):
        import json

        value = json.loads(value)  # a JSONDecodeError is a ValueError: reported by coerce
    if not isinstance(value, dict):
        raise TypeError
    return dict(value)


def _coerce_bool(value: Any) -> bool:
    """true/false from TOML, or 1/0/true/false/yes/no from an environment variable."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return value.strip().lower() in ("1", "true", "yes", "on")
    raise TypeError


def _type_name(kind: Any) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false",
            list: "a list of strings",
            dict: "a table (a JSON object in a variable)"}.get(kind, getattr(kind, "__name__", str(kind)))


def policy_fields() -> dict[str, Any]:
    """Name -> type of every check setting a config may set."""
    from modelci.checks import Policy

    return {f.name: f.type for f in dataclasses.fields(Policy)}


def validate_policy(table: Any, where: str) -> dict[str, Any]:
    """Check a table of check settings: known keys and the right types."""
    if not isinstance(table, dict):
        raise UserError(f"{where} must be a table of check settings")
    fields = policy_fields()
    checked = {}
    for key, value in table.items():
        if key not in fields:
            raise UserError(f"{where}: unknown key {key!r}; known keys: {', '.join(sorted(fields))}")
        kind = str(fields[key])
        if "bool" in kind:
            ok = isinstance(value, bool)
        elif "str" in kind:
            ok = isinstance(value, str)
        elif "int" in kind and "float" not in kind:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            raise UserError(f"{where}: key {key!r} must be {kind.replace(' | None', '')}, got {value!r}")
        if key == "direction" and value not in ("lower", "higher"):
            raise UserError(f"{where}: key 'direction' must be \"lower\" or \"higher\" (which is better), "
                            f"got {value!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            _check_setting_range(key, value, where)
        checked[key] = value
    return checked


def _check_setting_range(key: str, value: float, where: str) -> None:
    """A number among the check settings: finite; alpha a probability; a factor 1 or more (1.10 flags 10% worse);
    every other one (tolerances, floors, noise, thresholds) 0 or more. A value outside would not fail loudly:
    it would quietly flag everything, or nothing."""
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer of hundreds of digits is no float; math.isfinite raised on it
        finite = False
    if not finite:
        raise UserError(f"{where}: key {key!r} must be a finite number, got {short_number(value)}")
    if key == "alpha" and not 0 < value < 1:
        raise UserError(f"{where}: key 'alpha' is a significance level, between 0 and 1 (such as 0.05), "
                        f"got {value!r}")
    if key == "noise_cv_runs" and value < 2:
        raise UserError(f"{where}: key 'noise_cv_runs' is how many runs noise_cv was measured from, 2 or more "
                        f"(leave it out when noise_cv is exact), got {value!r}")
    if key.endswith("_factor") and value < 1:
        raise UserError(f"{where}: key {key!r} must be 1 or more (1.10 flags 10% worse), got {value!r}")
    if value < 0:
        raise UserError(f"{where}: key {key!r} must not be negative, got {value!r}")


def validate_overrides(entries: Any, where: str) -> list[dict[str, Any]]:
    """Check the [[overrides]] entries: each has a workload and/or metric pattern and check settings."""
    if not isinstance(entries, list):
        raise UserError(f"{where}: 'overrides' must be an array of tables ([[overrides]])")
    checked = []
    for number, entry in enumerate(entries, 1):
        label = f"{where}: [[overrides]] entry {number}"
        if not isinstance(entry, dict):
            raise UserError(f"{label} must be a table")
        patterns = {k: entry[k] for k in ("workload", "metric") if k in entry}
        for key, value in patterns.items():
            if not isinstance(value, str) or not value:  # "" matched nothing, silently, as [[policy]] refuses
                raise UserError(f"{label}: key {key!r} must be a non-empty string pattern, got {value!r}")
        if not patterns:
            raise UserError(f"{label} needs a 'workload' or 'metric' pattern")
        from modelci.alarms.settings import unknown_builtin_metric

        unknown_builtin_metric(patterns.get("metric", "*"), label)
        settings = validate_policy({k: v for k, v in entry.items() if k not in patterns}, label)
        checked.append({**patterns, **settings, "_entry": number})
    return checked


def validate_env(table: Any, where: str, root: Path) -> dict[str, Any]:
    """Check the [env] table: `constraints` (a list of files) and `platform_overrides` (platform glob -> file).

    Paths are made absolute against the config file's folder; the files themselves are read when used.
    """
    if not isinstance(table, dict):
        raise UserError(f"{where} must be a table with `constraints` and `platform_overrides`")
    known = {"constraints", "platform_overrides"}
    for key in table:
        if key not in known:
            raise UserError(f"{where}: unknown key {key!r}; known keys: {', '.join(sorted(known))}")
    files = table.get("constraints", [])
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise UserError(f"{where}: key 'constraints' must be a list of file paths, got {files!r}")
    overrides = table.get("platform_overrides", {})
    if not isinstance(overrides, dict) or not all(isinstance(v, str) for v in overrides.values()):
        raise UserError(f"{where}: key 'platform_overrides' must be a table of platform = \"file\" "
                        f"(e.g. linux-aarch64 = \"constraints/aarch64.txt\"), got {overrides!r}")
    return {"constraints": [absolute_path(f, root, f"{where}: key 'constraints'") for f in files],
            "platform_overrides": {k: absolute_path(v, root, f"{where}: key 'platform_overrides'")
                                   for k, v in overrides.items()}}
