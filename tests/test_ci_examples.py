"""The ready-made pipelines in examples/ci stay true: each passes its CI system's own checker, and every `modelci`
command line in them parses with modelci's own argument parser, so a renamed flag breaks this test and not a
user's CI.

- GitHub workflows: actionlint (with shellcheck on the `run:` scripts, which `.ci/run` installs);
- the GitLab file: GitLab's CI schema, as check-jsonschema vendors it;
- the Jenkinsfile: no checker runs without a Jenkins server, so its command lines are what is checked.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from modelci import cli
from modelci.commands import run as run_command
from modelci.errors import UserError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "ci"
GITHUB = sorted((EXAMPLES / "github").glob("*.yml"))
GITLAB = EXAMPLES / "gitlab" / ".gitlab-ci.yml"
JENKINS = EXAMPLES / "jenkins" / "Jenkinsfile"
#: the keys whose values are shell scripts, in GitHub and GitLab files
SCRIPT_KEYS = {"run", "script", "before_script", "after_script"}
#: tokens after which a word is in command position
COMMAND_START = {";", "&&", "||", "|", "(", "{", "!", "then", "do", "else", "if", "while", "until"}


def tool(name: str) -> str:
    """The console script `name` installed next to this interpreter (the test extras install it)."""
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    assert found, f"{name} is not installed; `pip install -e '.[test]'` installs it"
    return found


def yaml_scripts(path: Path) -> list[str]:
    """Every shell script of a GitHub or GitLab file: the strings under run/script/before_script/after_script."""
    found: list[str] = []

    def walk(node, key=None):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for item in node:
                walk(item, key)
        elif isinstance(node, str) and key in SCRIPT_KEYS:
            found.append(node)

    walk(yaml.safe_load(path.read_text()))
    return found


def groovy_scripts(path: Path) -> list[str]:
    """The shell scripts of a Jenkinsfile: the string after each `sh`, with Groovy's line continuations and
    escapes applied as Groovy applies them."""
    text = path.read_text()
    scripts = re.findall(r"\bsh\s*\(?\s*(?:script:\s*)?('''|\"\"\"|'|\")(.*?)\1", text, flags=re.DOTALL)
    return [body.replace("\\\n", "").replace("\\\\", "\\") for _, body in scripts]


def command_lines(script: str) -> list[list[str]]:
    """The argument lists of the `modelci` commands in a shell script (without the word `modelci`)."""
    script = re.sub(r"\$\{\{.*?\}\}", "EXPR", script)  # a GitHub expression stands for one word
    script = script.replace("\\\n", " ")
    commands = []
    for line in script.splitlines():
        if line.strip().startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
        for i, token in enumerate(tokens):
            if token == "modelci" and (i == 0 or tokens[i - 1] in COMMAND_START):
                args = []
                for word in tokens[i + 1:]:
                    if word and set(word) <= set("();<>|&"):
                        break
                    args.append(word)
                commands.append(args)
    return commands


def strict_parser() -> argparse.ArgumentParser:
    """modelci's parser, with abbreviated long options refused everywhere (`--mark` for `--markdown` would parse,
    and would hide the rename of the flag it stands for)."""
    parser, _ = cli.build_parser()
    stack = [parser]
    while stack:
        current = stack.pop()
        current.allow_abbrev = False
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
    return parser


def problems(args: list[str]) -> str | None:
    """Why `modelci ARGS` would not start, or None when it parses (and, for `run`, when its options agree)."""
    parser = strict_parser()
    errors: list[str] = []
    for each in [parser, *_all_subparsers(parser)]:
        each.error = lambda message, errors=errors: (errors.append(message), (_ for _ in ()).throw(SystemExit(2)))
    try:
        parsed = parser.parse_args(args)
    except SystemExit:
        return errors[-1] if errors else "exited while parsing"
    if parsed.command == "run":  # the checks `run` makes before it starts, without running anything
        try:
            run_command.bisect_plan(parsed, run_command.target_spec(parsed))
        except UserError as exc:
            return str(exc)
    return None


def _all_subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found, stack = [], [parser]
    while stack:
        for action in stack.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                found.extend(action.choices.values())
                stack.extend(action.choices.values())
    return found


def commands_of(path: Path) -> list[list[str]]:
    scripts = groovy_scripts(path) if path.name == "Jenkinsfile" else yaml_scripts(path)
    return [args for script in scripts for args in command_lines(script)]


ALL = [*GITHUB, GITLAB, JENKINS]


def test_the_examples_are_all_there():
    assert [p.name for p in GITHUB] == ["modelci-nightly.yml", "modelci-pr.yml"]
    assert GITLAB.is_file() and JENKINS.is_file()


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.relative_to(EXAMPLES).as_posix())
def test_every_modelci_command_line_parses(path):
    found = commands_of(path)
    assert found, f"no modelci command found in {path}"
    bad = {shlex.join(["modelci", *args]): problems(args) for args in found if problems(args)}
    assert not bad, "\n".join(f"{line}\n    -> {why}" for line, why in bad.items())


@pytest.mark.parametrize("path, expected", [
    (EXAMPLES / "github" / "modelci-pr.yml", {("run", "pr")}),
    (EXAMPLES / "github" / "modelci-nightly.yml", {("run", "nightly"), "alarms list", "alarms check", "report",
                                                   "env gc"}),
    (GITLAB, {("run", "pr"), ("run", "nightly"), "alarms list", "alarms check", "report", "env gc"}),
    (JENKINS, {("run", "pr"), ("run", "nightly"), "alarms list", "alarms check", "report", "env gc"}),
], ids=["github-pr", "github-nightly", "gitlab", "jenkins"])
def test_each_pipeline_does_its_job(path, expected):
    """A PR job runs the build without alarms and writes all three report files; a nightly job bisects on alarm,
    lists and checks alarms, writes the site and keeps its cache small."""
    found = set()
    for args in commands_of(path):
        parsed = strict_parser().parse_args(args)
        if parsed.command == "run":
            assert (parsed.json_path, parsed.junit, parsed.markdown) == (
                "modelci.json", "modelci-junit.xml", "modelci-summary.md"), args
            assert parsed.repo and parsed.ref, args  # the build of the commit under test
            found.add(("run", "nightly" if parsed.bisect_on_alarm else "pr"))
            assert parsed.alarms is (not not parsed.bisect_on_alarm), "a PR run opens no alarm; a nightly does"
        else:
            found.add(" ".join(args[:2]) if args[0] in ("alarms", "env") else args[0])
    assert found == expected


def test_the_checker_catches_a_renamed_or_misused_flag():
    assert problems(["run", "--repo", ".", "--ref", "X", "--markdown", "s.md"]) is None
    assert "unrecognized arguments: --mark" in problems(["run", "--repo", ".", "--mark", "s.md"])
    assert "--markdwn" in problems(["compare", "a", "b", "--markdwn", "s.md"])
    assert "needs --good" in problems(["run", "--repo", ".", "--bisect-on-alarm"])
    assert "invalid choice: 'alarm'" in problems(["alarm", "list"])
    script = 'x=1; modelci run --repo . --ref "$SHA" \\\n  --json a.json || code=$?\n# modelci nothing\n'
    assert command_lines(script) == [["run", "--repo", ".", "--ref", "$SHA", "--json", "a.json"]]
    assert command_lines("{ echo '```'; modelci alarms list; echo; } >> s") == [["alarms", "list"]]
    assert command_lines("pip install modelci 'modelci[s3]'; echo modelci run") == []


@pytest.mark.parametrize("path", GITHUB, ids=lambda p: p.name)
def test_github_workflows_pass_actionlint(path):
    assert shutil.which("shellcheck"), "shellcheck checks the run: scripts; .ci/run installs it (apt)"
    done = subprocess.run([tool("actionlint"), "-no-color", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_fails_a_broken_workflow(tmp_path):
    """The check can fail: a misspelt input of a known action, and an unquoted variable (shellcheck)."""
    broken = (EXAMPLES / "github" / "modelci-pr.yml").read_text()
    broken = broken.replace("fetch-depth: 0", "fetch-dept: 0").replace('"$PR_NUMBER"', "$PR_NUMBER")
    (tmp_path / "broken.yml").write_text(broken)
    done = subprocess.run([tool("actionlint"), "-no-color", str(tmp_path / "broken.yml")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert '"fetch-dept" is not defined' in done.stdout and "SC2086" in done.stdout


def test_gitlab_file_validates_against_gitlabs_schema(tmp_path):
    check = [tool("check-jsonschema"), "--builtin-schema", "vendor.gitlab-ci"]
    done = subprocess.run([*check, str(GITLAB)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / ".gitlab-ci.yml"
    broken.write_text(GITLAB.read_text().replace("resource_group: modelci-history", "resource_groups: x"))
    done = subprocess.run([*check, str(broken)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "resource_groups" in done.stdout + done.stderr
