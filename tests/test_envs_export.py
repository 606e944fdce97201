"""Export bundles: reproduce.sh rebuilds the environment without Docker and gives the same outputs."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from modelci import config as config_module
from modelci import workflow
from modelci.envs import export, lockfile, refs
from modelci.errors import UserError
from modelci.store import Store


@pytest.fixture
def exported(fake_project, tmp_path):
    cfg = config_module.load()
    outcome = workflow.run(cfg, str(fake_project.v10), [str(fake_project.suite)], "Precision")
    record = refs.from_run(Store(cfg.db, cfg.artifacts), outcome.run_id)
    bundle = export.export(record, tmp_path / "bundle", cfg.root, {"seed": cfg.seed, "timeout": cfg.timeout})
    return fake_project, outcome, bundle


def test_reproduce_sh_gives_the_same_outputs_in_the_same_environment(exported, tmp_path):
    project, outcome, bundle = exported
    manifest = export.read_manifest(bundle.path)
    assert bundle.notes == []
    assert manifest["environment"] == outcome.environment.id and manifest["run"] == outcome.run_id
    expected = manifest["results"]["fakesuite/Precision"]["outputs"]
    assert set(expected) == {"prediction", "scaled"}

    empty = tmp_path / "no-wheels-here"
    empty.mkdir()
    env = {k: v for k, v in project.env.items() if not k.startswith("MODELCI_")}
    # another cache and an empty find-links folder: everything must come from the bundle
    env.update(MODELCI=f"{sys.executable} -m modelci.cli", MODELCI_CACHE_DIR=str(tmp_path / "other-cache"),
               MODELCI_FIND_LINKS=str(empty), PIP_NO_INDEX="1")
    # a CI job's own history, exported for its runs: the reproduction is not stored there
    env.update(MODELCI_DB=str(tmp_path / "team.db"), MODELCI_ARTIFACTS=str(tmp_path / "team-artifacts"))
    proc = subprocess.run([str(bundle.path / "reproduce.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    db = sqlite3.connect(bundle.path / "reproduced" / "history.db")
    try:
        (environment_id,) = db.execute("select environment_id from runs").fetchone()
        outputs = dict(db.execute("select name, sha256 from outputs").fetchall())
    finally:
        db.close()
    assert environment_id == outcome.environment.id
    assert outputs == expected
    assert not (tmp_path / "team.db").exists() and not (tmp_path / "team-artifacts").exists()

    # the same build from elsewhere (a git target's clone on another machine) replaces the bundle's
    elsewhere = tmp_path / "elsewhere" / "fakefw-1.0-py3-none-any.whl"
    proc = subprocess.run([str(bundle.path / "reproduce.sh")], cwd=tmp_path, capture_output=True, text=True,
                          env={**env, "MODELCI_REPRODUCE_TARGET": str(elsewhere)}, timeout=300)
    assert proc.returncode == 2 and f"target '{elsewhere}': no such wheel file" in proc.stderr, proc.stderr


@pytest.mark.parametrize("spec, folder", [
    ("git+/srv/repos/fw@abc", "/srv/repos/fw"),
    ("git+file:///srv/repos/fw@abc#build=wheel", "/srv/repos/fw"),
    ("git+../fw@v1", "../fw"),
    ("git+https://git.example/fw.git@v1", None),
    ("git+ssh://git@git.example/fw.git@v1", None),
    ("git+git@git.example:team/fw.git@v1", None),
])
def test_a_git_target_from_a_folder_of_this_machine_is_named_in_the_bundles_notes(spec, folder):
    assert export.local_repository(spec) == folder
    notes: list[str] = []
    export._note_local_repository({"target_kind": "git", "target_spec": spec, "target_commit": "a" * 40},
                                  spec, notes)
    assert ("MODELCI_REPRODUCE_TARGET=git+URL@aaaaaaaaaaaa" in " ".join(notes)) == (folder is not None)
    assert "the Dockerfile's image holds the environment without the target" in notes[-1]


def test_bundle_files_carry_their_schemas(exported):
    _, outcome, bundle = exported
    lock = lockfile.read(bundle.path / "lock.txt")
    assert lock.environment == outcome.environment.id and lock.target == "fakefw==1.0"
    assert lock.wheels[0]["path"] == str(bundle.path / "wheels" / "fakefw-1.0-py3-none-any.whl")
    fingerprint = json.loads((bundle.path / "fingerprint.json").read_text())
    assert fingerprint["schema"] == outcome.environment.fingerprint["schema"]
    dockerfile = (bundle.path / "Dockerfile").read_text()
    assert f"python:{fingerprint['python']}-slim" in dockerfile and "uv pip sync" in dockerfile
    assert os.access(bundle.path / "reproduce.sh", os.X_OK)

    manifest = bundle.path / "bundle.json"
    data = json.loads(manifest.read_text())
    data["schema"] = "modelci.bundle/2"
    manifest.write_text(json.dumps(data))
    with pytest.raises(UserError, match="has schema 'modelci.bundle/2'; this modelci reads 'modelci.bundle/1'"):
        export.read_manifest(bundle.path)
    (bundle.path / "fingerprint.json").write_text(json.dumps({**fingerprint, "schema": 99}))
    with pytest.raises(UserError, match="fingerprint schema 99"):
        refs.resolve(str(bundle.path), store=None, cache_dir=bundle.path)


def test_export_refuses_what_it_cannot_reproduce(exported, tmp_path):
    project, outcome, bundle = exported
    cfg = config_module.load()
    record = refs.from_run(Store(cfg.db, cfg.artifacts), outcome.run_id)
    with pytest.raises(UserError, match="is not empty"):
        export.export(record, bundle.path, cfg.root, {})
    with pytest.raises(UserError, match="--out '': give the folder to export into"):  # not ". is not empty"
        export.export(record, "", cfg.root, {})
    record.run["target_kind"] = "current"
    with pytest.raises(UserError, match="used the `current` interpreter"):
        export.export(record, tmp_path / "b2", cfg.root, {})
    record.run = None
    with pytest.raises(UserError, match="is not a run"):
        export.export(record, tmp_path / "b3", cfg.root, {})
