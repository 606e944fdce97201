"""Constraints: parsing, per-platform overrides, derivation from a lock, application to every environment, check."""

from __future__ import annotations

import sysconfig

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from modelci import config as config_module
from modelci import workflow
from modelci.envs import constraints as cons
from modelci.envs import installed_version
from modelci.envs.check import check
from modelci.envs.lockfile import Lock
from modelci.errors import UserError
from modelci.store import Store


def lock(pins: dict[str, str], requested=(), platform="linux-x86_64") -> Lock:
    return Lock(pins=pins, implementation="CPython", python="3.11", platform=platform, requested=list(requested))


# --- parsing and overrides ----------------------------------------------------------------------------------


@pytest.mark.parametrize("line", ["numpy>=1,,2", "numpy @ https://example.com/numpy.whl", "torch[cuda]<3", "==1.0"])
def test_unparsable_constraint_names_file_and_line(tmp_path, line):
    path = tmp_path / "ci-constraints.txt"
    path.write_text(f"# reviewed\nsix==1.16\n\n{line}\n")
    with pytest.raises(UserError) as caught:
        cons.parse_file(path)
    assert f"{path}, line 4: {line!r}" in str(caught.value)


def test_unreadable_constraints_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot read constraints file .*missing.txt"):
        cons.parse_file(tmp_path / "missing.txt")


def test_platform_override_replaces_what_it_names(tmp_path):
    main = tmp_path / "constraints.txt"
    main.write_text("numpy<2\ntorch>=2.13,<2.14  # the pilot's minor\n")
    arm = tmp_path / "aarch64.txt"
    arm.write_text("torch>=2.12,<2.14\n")
    overrides = {"linux-aarch64": str(arm)}

    on_x86 = cons.load([str(main)], overrides, "linux-x86_64")
    on_arm = cons.load([str(main)], overrides, "linux-aarch64")
    on_any_linux = cons.load([str(main)], {"linux-*": str(arm)}, "linux-x86_64")

    assert [str(c.requirement) for c in on_x86.entries] == ["numpy<2", "torch<2.14,>=2.13"]
    assert [str(c.requirement) for c in on_arm.entries] == ["numpy<2", "torch<2.14,>=2.12"]
    assert [str(c.requirement) for c in on_any_linux.entries] == ["numpy<2", "torch<2.14,>=2.12"]
    assert on_x86.digest() != on_arm.digest()
    assert cons.platform_key("macosx-14.0-arm64") == "macosx-arm64"


def test_contradictions_respect_markers():
    constraints = cons.ConstraintSet([
        cons.Constraint(r, "c.txt", n) for n, r in enumerate(map(Requirement, [
            "numpy<2", 'torch<2; sys_platform == "darwin"', "six>=1.16"]), 1)])
    found = cons.contradictions(constraints, lock({"numpy": "2.0.2", "torch": "2.13.0+cpu", "six": "1.16.0"}))
    assert found == ["numpy==2.0.2 contradicts `numpy<2` (c.txt:1)"]
    on_mac = cons.contradictions(constraints, lock({"torch": "2.13.0"}, platform="macosx-arm64"))
    assert on_mac == ['torch==2.13.0 contradicts `torch<2; sys_platform == "darwin"` (c.txt:2)']


# --- derivation from a pilot lock ---------------------------------------------------------------------------

PILOT = {"tensorflow": "1.6.8", "torch": "2.13.0+cpu", "numpy": "2.0.0rc1", "six": "1", "tzdata": "2024.1"}


@pytest.mark.parametrize("level, expected", [
    ("major", {"tensorflow": ">=1,<2", "torch": ">=2,<3", "numpy": ">=2.0.0rc1,<3", "six": ">=1,<2"}),
    ("minor", {"tensorflow": ">=1.6,<1.7", "torch": ">=2.13,<2.14", "numpy": ">=2.0.0rc1,<2.1",
               "six": ">=1.0,<1.1", "tzdata": ">=2024.1,<2024.2"}),
    ("patch", {"tensorflow": ">=1.6.8,<1.6.9", "torch": ">=2.13.0,<2.13.1", "six": ">=1.0.0,<1.0.1"}),
])
def test_derive_loose_constraints(level, expected):
    text = cons.derive(lock(PILOT), level, source="pilot.lock")
    lines = dict(line.split(">", 1) for line in text.splitlines() if not line.startswith("#"))
    derived = {name: ">" + rest for name, rest in lines.items()}
    for name, bounds in expected.items():
        assert derived[name] == bounds, name
    assert "derived from pilot.lock" in text.splitlines()[0] and f"level {level}" in text.splitlines()[0]
    for name, version in PILOT.items():  # the pilot satisfies what it produced, and so does a CUDA build
        assert SpecifierSet(derived[name]).contains(version, prereleases=True)
    assert SpecifierSet(derived["torch"]).contains("2.13.0+cu121")


def test_derive_only_direct_and_bad_level():
    text = cons.derive(lock(PILOT, requested=["tensorflow==1.6.8", "torch"]), "minor", only_direct=True)
    assert [line.split(">")[0] for line in text.splitlines()[1:]] == ["tensorflow", "torch"]
    with pytest.raises(UserError, match="no `# requested:` header"):
        cons.derive(lock(PILOT), "minor", only_direct=True)
    with pytest.raises(UserError, match="--level 'micro'"):
        cons.derive(lock(PILOT), "micro")


# --- config, every environment, check -----------------------------------------------------------------------


def test_env_table_is_validated(tmp_path):
    (tmp_path / "modelci.toml").write_text('[env]\nconstraints = "c.txt"\n')
    with pytest.raises(UserError, match=r"\[env\]: key 'constraints' must be a list"):
        config_module.load(cwd=tmp_path)
    (tmp_path / "modelci.toml").write_text('[env]\nconstrains = ["c.txt"]\n')
    with pytest.raises(UserError, match="unknown key 'constrains'"):
        config_module.load(cwd=tmp_path)
    (tmp_path / "modelci.toml").write_text('[env]\nconstraints = ["ci/c.txt"]\n'
                                           'platform_overrides = {"linux-*" = "a.txt"}\n')
    env = config_module.load(cwd=tmp_path).env
    assert env == {"constraints": [str(tmp_path / "ci" / "c.txt")],
                   "platform_overrides": {"linux-*": str(tmp_path / "a.txt")}}


@pytest.fixture
def constrained(fake_project):
    """The fakefw project with `[env] constraints` capping fakefw below 1.1, and one run of `fakefw` (unpinned)."""
    (fake_project.root / "ci").mkdir()
    (fake_project.root / "ci" / "constraints.txt").write_text("fakefw<1.1\n")
    with open(fake_project.root / "modelci.toml", "a") as handle:
        handle.write('[env]\nconstraints = ["ci/constraints.txt"]\n')
    cfg = config_module.load()
    outcome = workflow.run(cfg, "fakefw", [str(fake_project.suite)], "Stable")
    return fake_project, cfg, outcome


def run_check(cfg, **kwargs):
    return check(cfg.env, cfg.root, Store(cfg.db, cfg.artifacts), platform_tag=sysconfig.get_platform(), **kwargs)


def test_constraints_apply_to_every_environment_and_check_passes(constrained):
    project, cfg, outcome = constrained
    assert installed_version(outcome.environment, "fakefw") == "1.0"  # 1.1 is in find-links, but capped
    assert outcome.environment.fingerprint["build"]["constraints"]

    report = run_check(cfg)

    assert report.ok, report.problems
    assert any("ci/constraints.txt" in line for line in report.checked)


def test_check_fails_on_a_constraints_file_nothing_reads(constrained):
    project, cfg, _ = constrained
    stray = project.root / "requirements" / "gpu-constraints.txt"
    stray.parent.mkdir()
    stray.write_text("fakefw<2\n")

    report = run_check(cfg)
    explicit = run_check(cfg, files=[str(project.root / "ci" / "constraints.txt"), str(stray)])

    assert not report.ok and report.problems == [f"{stray} is not consumed: no environment reads it. Add it to "
                                                 "[env] constraints (or [env] platform_overrides) in the config, "
                                                 "or delete it"]
    assert explicit.problems == report.problems


def test_check_fails_when_a_lock_contradicts_or_the_environment_predates_the_constraints(constrained, tmp_path):
    project, cfg, outcome = constrained
    pilot = lock({"fakefw": "1.1"})
    pilot.file = "pilot.lock"

    contradicted = run_check(cfg, locks=[pilot])
    assert contradicted.problems == ["pilot.lock: fakefw==1.1 contradicts `fakefw<1.1` "
                                     f"({project.root / 'ci' / 'constraints.txt'}:1)"]

    (project.root / "ci" / "constraints.txt").write_text("fakefw<1.1\nhelperlib>=2\n")
    stale = run_check(config_module.load())
    assert len(stale.problems) == 1 and "was built without the current [env] constraints" in stale.problems[0]
    assert f"environment {outcome.environment.id}" in stale.problems[0]
    assert any("helperlib>=2" in w and "no checked environment holds" in w for w in stale.warnings)


def test_check_reports_an_unparsable_configured_file(constrained):
    project, cfg, _ = constrained
    (project.root / "ci" / "constraints.txt").write_text("fakefw<1.1\nfakefw >> 2\n")
    report = run_check(cfg)
    assert not report.ok and "constraints.txt, line 2: 'fakefw >> 2' is not a constraint" in report.problems[0]


def test_cli_env_check_and_constraints(constrained, tmp_path):
    project, cfg, outcome = constrained
    derived = project.cli("env", "constraints", "--from", "latest", "--level", "minor")
    assert derived.returncode == 0, derived.stderr
    assert "fakefw>=1.0,<1.1" in derived.stdout.splitlines()

    (project.root / "extra-constraints.txt").write_text("fakefw<3\n")
    failed = project.cli("env", "check")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "extra-constraints.txt is not consumed" in failed.stdout and "[env] constraints" in failed.stdout
