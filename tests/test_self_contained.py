"""The project carries its own design: nothing in the tree points at documents outside the repository or at
tracker numbers. A reader who clones modelci must be able to follow every reference; a reason belongs where
it matters, written out, not behind an "issue 9" that the clone does not contain."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: what a reference out of the repository looks like
OUTSIDE = [
    (re.compile(r"\b(?:DESIGN|STYLE)\.md\b"), "a design document outside the repository"),
    (re.compile(r"\.\./shared\b"), "a folder outside the repository"),
    (re.compile(r"\b[Ii]ssues? #?\d+\b"), "an issue number"),
    # another project's tracker (`asv #623`) or an unnamed one (`tracked in #123`); not modelci's own alarm
    # numbers (`alarm #1`) nor a merged PR in a commit subject (`pull request #42`, `PR #31`)
    (re.compile(r"\b(?!alarm\b|request\b)[a-z][\w-]*\s#\d+\b"), "a tracker's number"),
    (re.compile(r"\bthe issue's\b"), "an issue"),
]


def tracked_text_files():
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in listed.splitlines():
        path = ROOT / name
        if path.suffix in {".py", ".md", ".toml", ".html", ".j2", ".yml", ".yaml", ".cfg", ".txt", ".groovy"} \
                or name in {".ci/run", "Jenkinsfile"}:
            if path.is_file():
                yield name, path


def test_no_reference_points_outside_the_repository():
    found = []
    for name, path in tracked_text_files():
        if name == "tests/test_self_contained.py":
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for pattern, what in OUTSIDE:
                if pattern.search(line):
                    found.append(f"{name}:{number}: {what}: {line.strip()[:100]}")
    assert not found, "references out of the repository:\n" + "\n".join(found)


def test_the_design_the_docs_name_is_in_the_repository():
    named = set()
    for name, path in tracked_text_files():
        named.update(re.findall(r"\bdocs/[\w./-]+\.md\b", path.read_text(errors="replace")))
    assert "docs/design.md" in named
    missing = sorted(doc for doc in named if not (ROOT / doc).is_file())
    assert not missing, f"documents named but not in the repository: {missing}"
