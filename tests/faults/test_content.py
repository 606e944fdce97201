"""Content: any string a workload produces is stored and reported; names are checked once, at discovery.

One `modelci run` holds every probe of a group (a module-scoped fixture); each probe is a test of its own.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from probes import shared_run, workload

#: workload -> (setup body, expected status, texts the stored reason holds)
MESSAGES = {
    "Surrogate": ('raise OSError("cannot read " + os.fsdecode(b"data-\\xff.bin"))', "failed", ["data-\\udcff.bin"]),
    "Escape": ('raise ValueError("colour \\x1b[31mred\\x1b[0m")', "failed", ["colour"]),
    "Nul": ('raise ValueError("a\\x00b")', "failed", ["a\\x00b"]),
    "Controls": ('raise ValueError("".join(chr(c) for c in range(1, 32)))', "failed", ["ValueError"]),
    "NonCharacters": ('raise ValueError("\\ufffe\\uffff end")', "failed", ["end"]),
    "Emoji": ('raise ValueError("loss went 📉 ünïcödé")', "failed", ["📉 ünïcödé"]),
    "Huge": ('raise ValueError("x" * 1_000_000)', "failed", ["ValueError"]),
    "StderrBytes": ('sys.stderr.buffer.write(b"\\xff\\xfe\\x00\\x1b[0m broken\\n"); sys.stderr.flush()\n'
                    'raise RuntimeError("see stderr")', "failed", ["see stderr"]),
    "SurrogateMetric": ('ctx.record("m-" + os.fsdecode(b"\\xff"), 1.0)', "ok", []),
    "SurrogateSkip": ('raise modelci.SkipWorkload("needs " + os.fsdecode(b"\\xfe"))', "skipped", ["\\udcfe"]),
    "ExitWithText": ('print("bye \\x1b[0m", file=sys.stderr); sys.stderr.flush(); os._exit(3)', "crashed",
                     ["code 3"]),
    "BadOutputName": ("", "failed", ["output name"]),
}

NAMES_BAD = {
    "Slash": "a/b", "Dots": "../../x", "Space": "a b", "Hidden": ".hidden", "Backslash": "a\\\\b",
    "Tab": "a\\tb", "Long": "x" * 101, "NotText": 42, "Colon": "a:b", "Star": "a*",
}
NAMES_GOOD = {"Unicode": "名字", "Equals": "bs=32", "Dotted": "v1.2", "Plus": "a+b", "Under": "_x", "Empty": ""}


def _files() -> dict[str, str]:
    source = ""
    for name, (body, _, _) in MESSAGES.items():
        source += workload(name, body)
    source += '''
class BadOutputName(modelci.Workload):
    framework = "python"

    def setup(self, ctx):
        pass

    def train_step(self, ctx, step):
        return 0.0

    def infer(self, ctx):
        return {"../escape": [1.0]}
'''
    names = ""
    for cls, name in {**NAMES_BAD, **NAMES_GOOD}.items():
        names += workload(cls, attrs=f"name = {name!r}")
    factory = '''
class _Base(modelci.Workload):
    framework = "python"

    def setup(self, ctx):
        pass

    def train_step(self, ctx, step):
        return 0.0

    def infer(self, ctx):
        return {"y": [1.0]}


def make(n):
    class Made(_Base):
        name = f"Made{n}"
    return Made


Made1 = make(1)
Made2 = make(2)
Dynamic = type("Dynamic", (_Base,), {})
Alias = Dynamic
'''
    return {"messages.py": source, "names.py": names, "factory.py": factory,
            "dup_a.py": workload("Twin") + workload("Same", attrs='name = "Twice"') + workload("Other",
                                                                                            attrs='name = "Twice"'),
            "dup_b.py": workload("Twin")}


@pytest.fixture(scope="module")
def content(tmp_path_factory, probe_cache):
    return shared_run(tmp_path_factory, probe_cache, _files())


def test_the_run_is_stored_whole_and_fails(content):
    assert content.done.returncode == 1, content.done.stderr
    stored = content.project.stored("SELECT count(*) FROM results")[0][0]
    assert stored == len(content.project.report()["results"])


@pytest.mark.parametrize("name", list(MESSAGES))
def test_any_string_a_workload_makes_is_stored(content, name):
    _, status, texts = MESSAGES[name]
    result = content.check(f"suite/{name}", status, *texts)
    stored = content.project.stored("SELECT reason FROM results WHERE id = ?", result["result_id"])
    assert stored == [(result["reason"],)]


def test_the_junit_file_is_well_formed_xml(content):
    root = ET.parse(content.project.root / "junit.xml").getroot()
    text = ET.tostring(root, encoding="unicode")
    assert "data-\\udcff.bin" in text and "\x1b" not in text and "\x00" not in text
    content.project.assert_clean(content.done)


def test_the_markdown_summary_is_written(content):
    text = (content.project.root / "summary.md").read_text(encoding="utf-8")
    assert "suite/Surrogate" in text


@pytest.mark.parametrize("cls", list(NAMES_BAD))
def test_a_workload_name_that_cannot_be_a_path_is_an_error_naming_file_and_rule(content, cls):
    result = content.check(f"suite/names.py:{cls}", "error", "names.py, line", f"class {cls}", "is not allowed")
    assert "letters, digits" in result["reason"] or "non-empty" in result["reason"] or "characters" in result["reason"]
    assert not any(r["workload"].endswith("/x") for r in content.project.report()["results"])


def test_no_folder_was_made_outside_the_scratch_area(content):
    assert not (content.project.cache.parent / "x").exists() and not (content.project.cache / "x").exists()


@pytest.mark.parametrize("cls", list(NAMES_GOOD))
def test_a_workload_name_within_the_rule_runs(content, cls):
    content.check(f"suite/{NAMES_GOOD[cls] or cls}", "ok")  # no name: the class name


@pytest.mark.parametrize("workload_id, places", [("suite/Twin", ["dup_a.py", "dup_b.py"]),
                                                 ("suite/Twice", ["class Same", "class Other"])])
def test_a_duplicate_id_is_one_error_naming_both_places(content, workload_id, places):
    content.check(workload_id, "error", "defined 2 times", *places)
    assert [r["workload"] for r in content.project.report()["results"]].count(workload_id) == 1


@pytest.mark.parametrize("name", ["Made1", "Made2", "Dynamic"])
def test_a_class_made_by_a_factory_is_a_workload(content, name):
    content.check(f"suite/{name}", "ok")


@pytest.fixture(scope="module")
def equals_folder(tmp_path_factory, probe_cache):
    return shared_run(tmp_path_factory, probe_cache, {"m.py": workload("Model")}, folder="bs=32")


def test_a_suite_folder_named_with_an_equals_sign_works(equals_folder):
    assert equals_folder.done.returncode == 0, equals_folder.done.stderr
    equals_folder.check("bs=32/Model", "ok")


def test_text_that_looks_like_an_emoji_code_is_printed_as_it_is(content):
    assert "suite/names.py:Star: error" in content.done.stdout
    assert "⭐" not in content.done.stdout


def test_no_control_character_a_workload_gave_reaches_the_terminal(content):
    """A workload's message with a colour code or a NUL is printed as a visible escape, by `run` and by `show`:
    raw, it recoloured the rest of a CI log or moved the cursor over earlier lines."""
    shown = content.project.cli("show", "latest")
    for done in (content.done, shown):
        printed = done.stdout + done.stderr
        assert "\x1b" not in printed and "\x00" not in printed, printed[-2000:]
    assert "colour \\x1b[31mred" in shown.stdout
