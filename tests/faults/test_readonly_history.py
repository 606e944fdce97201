"""A history on a read-only filesystem (a share mounted read-only, a CI cache restored read-only): the commands
that read it work, and the ones that write it say why they cannot, before any workload runs.

SQLite in WAL mode makes a shared-memory file beside the database, so even a read-only open failed with
"unable to open database file" (exit 3). The filesystem here is a real read-only bind mount of the project.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clicalls import digest

MODELCI = [sys.executable, "-c", "from modelci.cli import entry; entry()"]
#: as root, file modes bind only without these capabilities: a command runs under setpriv without them
UNPRIVILEGED = (["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--inh-caps=-all"]
                if os.geteuid() == 0 else [])


def modelci(cwd: Path, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELCI_")}
    env["MODELCI_CACHE_DIR"] = str(cwd.parent.parent / "cache")
    return subprocess.run([*prefix, *MODELCI, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def readonly(tmp_path_factory):
    """A project with one stored run, then the same folder mounted read-only at another path."""
    root = tmp_path_factory.mktemp("readonly")
    (root / "rw").mkdir()
    assert modelci(root / "rw", "init", "--dir", "p").returncode == 0
    done = modelci(root / "rw" / "p", "-q", "run", "--target", "current")
    assert done.returncode == 0, done.stderr
    mount = root / "ro" / "p"
    mount.mkdir(parents=True)
    bound = subprocess.run(["mount", "--bind", str(root / "rw" / "p"), str(mount)], capture_output=True, text=True)
    if bound.returncode != 0:
        pytest.skip(f"a read-only bind mount needs root with CAP_SYS_ADMIN, as CI has: {bound.stderr.strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mount)], check=True, capture_output=True)
        assert not os.access(mount, os.W_OK)
        yield mount
    finally:
        # lazily: a process of a failed test that still holds the file must not leave the mount behind
        subprocess.run(["umount", "--lazy", str(mount)], check=True)



@pytest.mark.parametrize("argv, says", [
    (["history"], "current"),
    (["show", "latest"], "models/SoftmaxClassifier"),
    (["alarms"], "no alarms"),
    (["history", "--changes"], "no change points"),
])
def test_the_commands_that_read_a_history_read_it_on_a_readonly_filesystem(readonly, argv, says):
    before = digest(readonly / ".modelci" / "history.db")
    done = modelci(readonly, *argv)
    assert done.returncode == 0, done.stderr
    assert says in done.stdout
    assert digest(readonly / ".modelci" / "history.db") == before


def test_a_site_is_written_elsewhere_from_a_readonly_history(readonly, tmp_path):
    done = modelci(readonly, "report", "--out", str(tmp_path / "site"))
    assert done.returncode == 0, done.stderr
    assert "models/SoftmaxClassifier" in (tmp_path / "site" / "index.html").read_text()


def test_a_run_into_a_readonly_history_says_so_before_any_workload(readonly):
    done = modelci(readonly, "run", "--target", "current")
    assert done.returncode == 2, done.stderr
    folder = readonly / ".modelci"
    assert (f"cannot write the history database {folder / 'history.db'}: its folder {folder} cannot be written"
            in done.stderr)
    assert "Traceback" not in done.stderr and "models/SoftmaxClassifier" not in done.stdout + done.stderr


def test_a_write_to_a_history_opened_where_it_cannot_be_written_names_the_folder(readonly):
    from modelci.errors import UserError
    from modelci.store import Store

    store = Store(str(readonly / ".modelci" / "history.db"), str(readonly / ".modelci" / "artifacts"), create=False)
    try:
        assert store.readonly and store.runs()
        with pytest.raises(UserError, match=f"is read-only here: its folder {readonly / '.modelci'} cannot be "
                                            "written"):
            store.ingest(target=None, environment=None, runner="x", results=[])
    finally:
        store.engine.dispose()  # the mount is taken down after the module


def test_a_history_file_that_cannot_be_written_is_refused_before_any_workload_runs(tmp_path):
    """A read-only history file in a folder that can be written (its mode, not the filesystem's) was found out
    only at the ingest, after every workload had run: "Nothing of this run is stored". A run and a compare are
    refused before anything runs now, and the readers still read it."""
    if UNPRIVILEGED and shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) drops root's file-mode override here; .ci/run installs it")
    (tmp_path / "rw").mkdir()
    assert modelci(tmp_path / "rw", "init", "--dir", "p").returncode == 0
    project = tmp_path / "rw" / "p"
    assert modelci(project, "-q", "run", "--target", "current").returncode == 0
    db = project / ".modelci" / "history.db"
    db.chmod(0o444)
    before = digest(db)
    for argv in (["run", "--target", "current"], ["compare", "current", "current", "--rerun"]):
        done = modelci(project, *argv, prefix=tuple(UNPRIVILEGED))
        assert done.returncode == 2, done.stderr
        assert f"cannot write the history database {db} (permission denied" in done.stderr
        assert "Traceback" not in done.stderr and "models/SoftmaxClassifier" not in done.stdout + done.stderr
    done = modelci(project, "history", prefix=tuple(UNPRIVILEGED))
    assert done.returncode == 0 and "models/SoftmaxClassifier" in done.stdout, done.stderr
    assert digest(db) == before
