"""The framework helpers: every fact about a framework lives on its helper class, and the harness asks the
registry for it; a framework registered with one line is known everywhere. Real subprocesses, no mocks."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from modelci import steps
from modelci.envs import fingerprint
from modelci.execute import local
from modelci.workload import frameworks, worker

#: what each registered framework must say about itself
FACTS = ("name", "module", "distributions", "companions", "needs", "fork_safe_threads", "lazy_modules", "formats")


def test_every_helper_module_imports_and_tells_its_facts_without_its_framework(tmp_path):
    """The harness reads the facts outside the environment under test: importing a helper module must not import
    its framework. A fresh interpreter where importing any framework fails still gets every class and fact."""
    script = textwrap.dedent("""
        import json, sys
        for name in ("torch", "paddle", "jax", "jaxlib", "numpy"):
            sys.modules[name] = None  # `import name` now raises ImportError
        from modelci.workload import frameworks
        facts = {}
        for cls in frameworks.helper_classes():
            facts[cls.name] = {"module": cls.module, "distributions": list(cls.distributions),
                               "unsafe": [n for n, f in cls.formats.items() if f.unsafe],
                               "formats": list(cls.formats), "fork_safe_threads": cls.fork_safe_threads}
        print(json.dumps(facts))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert list(facts) == list(frameworks.REGISTRY)
    assert facts["paddle"]["distributions"] == ["paddlepaddle", "paddlepaddle-gpu"]
    assert facts["paddle"]["fork_safe_threads"] == 1
    assert facts["jax"]["distributions"] == ["jax"] and facts["jax"]["unsafe"] == []
    assert set(facts["torch"]["unsafe"]) == set(facts["torch"]["formats"]) - {"state_dict"}


@pytest.mark.parametrize("name", list(frameworks.REGISTRY))
def test_each_registered_helper_declares_every_fact(name):
    cls = frameworks.helper_class(name)
    assert cls.name == name
    for fact in FACTS:
        assert hasattr(cls, fact), (name, fact)
    assert all(isinstance(fmt, frameworks.HelperFormat) and fmt.name == key and fmt.why
               for key, fmt in cls.formats.items()), name
    if name != "python":
        assert cls.module == name and cls.distributions, name
    helper = cls()
    assert set(helper.unsafe_formats) == {key for key, fmt in cls.formats.items() if fmt.unsafe}


def test_an_unknown_framework_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown framework 'tensorflw'; known: .*jax.*torch"):
        frameworks.get_helper("tensorflw")


def test_the_harness_asks_the_registry():
    """The tables that used to list frameworks now come from the helpers."""
    assert frameworks.requirements("torch") == ["torch", "numpy"]
    assert frameworks.requirements("paddle") == ["paddlepaddle", "setuptools"]
    # paddlepaddle-gpu provides paddle: the environment does not need the CPU build as well
    assert frameworks.requirements("paddle", {"paddlepaddle-gpu"}) == ["setuptools"]
    assert frameworks.requirements("jax") == ["jax", "flatbuffers"]
    assert frameworks.requirements("python") == []
    assert steps.helper_needs("paddlepaddle-gpu") == ["setuptools"]
    assert steps.helper_needs("Torch") == ["numpy"]
    assert steps.helper_needs("requests") == []
    assert worker.fork_safe_threads("paddle") == 1 and worker.fork_safe_threads("jax") == 0
    assert worker.fork_safe_threads("requests") == 0
    lock = "jax==0.10.2\njaxlib==0.10.2\nrequests==2.0\ntorchvision==0.1\n"
    assert fingerprint.packages_of_interest(lock) == {"jax": "0.10.2", "jaxlib": "0.10.2", "torchvision": "0.1"}
    assert {"numpy", "torch", "paddle", "jax"} <= set(frameworks.framework_modules())


FAKE_HELPER = '''
from modelci.workload.frameworks import HelperFormat, PythonHelper, format_table


class ToyHelper(PythonHelper):
    name = "toyfw"
    module = "toyfw"
    distributions = ("toyfw", "toyfw-gpu")
    companions = ("toyfw-extras",)
    needs = ("toy-runtime",)
    fork_safe_threads = 2
    formats = format_table(HelperFormat("toy", unsafe=True, why="it unpickles"))

    def probe(self):
        import toyfw
        return {"version": toyfw.__version__, "build": "toy"}
'''


def test_a_framework_registered_with_one_line_is_known_everywhere(tmp_path, monkeypatch):
    """A new helper module plus one registry line: the environment's needs, what a workload implies, the
    fingerprint's packages and build facts (probed by the environment's interpreter), fork safety and the
    modules a result reports all know the framework."""
    (tmp_path / "toy_helper.py").write_text(FAKE_HELPER)
    (tmp_path / "toyfw.py").write_text("__version__ = '3.1'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(frameworks.REGISTRY, "toyfw", "toy_helper:ToyHelper")

    assert steps.helper_needs("toyfw-gpu") == ["toy-runtime"]
    assert frameworks.requirements("toyfw") == ["toyfw", "toy-runtime"]
    assert worker.fork_safe_threads("toyfw") == 2
    assert "toyfw" in frameworks.framework_modules()
    assert fingerprint.packages_of_interest("toyfw-gpu==3.1\ntoyfw-extras==1\n") == {"toyfw-gpu": "3.1",
                                                                                    "toyfw-extras": "1"}
    assert frameworks.get_helper("toyfw").unsafe_formats == ("toy",)

    # the probe runs the helper's `probe` in the environment's interpreter, with the toy modules on its path
    harness = local.shim_dir(tmp_path / "harness")
    (harness / "toy_helper.py").write_text(FAKE_HELPER)
    (harness / "toyfw.py").write_text("__version__ = '3.1'\n")
    script = Path(fingerprint.__file__).with_name("probe.py").read_text()
    registering = (f"import sys; sys.path.append({str(harness)!r})\n"
                   "import modelci.workload.frameworks as f; f.REGISTRY['toyfw'] = 'toy_helper:ToyHelper'\n")
    done = subprocess.run([sys.executable, "-I", "-c", registering + script, "", json.dumps(["toyfw"]), str(harness)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["frameworks"] == {"toyfw": {"version": "3.1", "build": "toy"}}
