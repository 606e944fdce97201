"""compat over a shared S3 artifact store: a real S3-compatible server (moto's server mode) on 127.0.0.1.

The producers record into the bucket; compat over the bucket gives the same matrix as over a local copy of it;
a read-only, anonymous client (a public bucket) refuses runs and still checks; a bucket made private is a
finding for every manifest, not a silent pass.
"""

from __future__ import annotations

import json
import os

import pytest
from compatfw import write_project

from modelci import compat, workflow
from modelci import config as config_module
from modelci.errors import UserError
from modelci.report import compat_report
from modelci.store import Store
from modelci.store import compat_schema as records

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")
pytest.importorskip("s3fs")

BUCKET = "modelci-artifacts"
PUBLIC_READ = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:ListBucket"],
     "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]}]}


def matrix_of(outcome) -> dict:
    """The matrix with each cell's outcome and error: what must not depend on where the store is."""
    return {(e.workload, e.format, e.producer["label"], e.consumer["label"]): (e.outcome, e.error)
            for e in outcome.entries}


@pytest.fixture(scope="module")
def s3(tmp_path_factory, env_cache):
    """A moto S3 server on a free port of 127.0.0.1, a public-read bucket, and compatfw 1.0/2.0 recorded into it."""
    root = tmp_path_factory.mktemp("compat-s3") / "project"
    paths = write_project(root, env_cache)
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith(("MODELCI_", "AWS_"))]:
            mp.delenv(key)
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("MODELCI_FIND_LINKS", str(paths["wheels"]))
        mp.setenv("PIP_NO_INDEX", "1")
        mp.chdir(root)
        server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            endpoint = f"http://127.0.0.1:{server._server.server_port}"
            client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
            client.create_bucket(Bucket=BUCKET)
            client.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps(PUBLIC_READ))
            mp.setenv("MODELCI_ARTIFACTS", f"s3://{BUCKET}/team")
            mp.setenv("MODELCI_ARTIFACTS_OPTIONS", json.dumps({"client_kwargs": {"endpoint_url": endpoint}}))
            cfg = config_module.load()
            for wheel in (paths["v1"], paths["v2"]):
                outcome = workflow.run(cfg, str(wheel), [str(paths["suite"])])
                assert [r.status for r in outcome.results] == ["ok"] * 5
            (paths["suite"] / "retired.py").unlink()
            yield dict(paths, root=root, cfg=cfg, endpoint=endpoint, client=client, mp=mp)
        finally:
            server.stop()


def test_saved_models_are_recorded_in_the_bucket(s3):
    keys = [o["Key"] for o in s3["client"].list_objects_v2(Bucket=BUCKET, Prefix="team/")["Contents"]]
    manifests = [k for k in keys if k.startswith(f"team/{records.INDEX}/")]
    assert len(manifests) == 7 + 6  # 1.0 saves 7 models, 2.0 six (it has no text format)
    assert all(k.endswith(".json") for k in manifests), "no temporary names may stay behind"


def test_compat_over_s3_gives_the_same_matrix_as_over_a_local_folder(s3, tmp_path):
    over_s3 = compat.check(s3["cfg"], str(s3["v2"]), [str(s3["suite"])])

    store = Store.from_config(s3["cfg"])
    local = tmp_path / "artifacts"
    store.artifacts.fs.get(f"{BUCKET}/team/", str(local), recursive=True)
    cfg = config_module.load(cli={"db": str(tmp_path / "local.db"), "artifacts": str(local)},
                             environ={k: v for k, v in os.environ.items() if k != "MODELCI_ARTIFACTS_OPTIONS"})
    over_folder = compat.check(cfg, str(s3["v2"]), [str(s3["suite"])])

    assert matrix_of(over_s3) == matrix_of(over_folder)
    assert compat_report.to_json(over_s3)["matrix"] == compat_report.to_json(over_folder)["matrix"]
    assert {e.outcome for e in over_s3.entries} == {"ok", "load_failed", "outputs_differ", "unsupported", "missing"}


def test_a_public_bucket_read_anonymously_and_read_only_serves_compat_and_refuses_runs(s3, tmp_path):
    expected = matrix_of(compat.check(s3["cfg"], str(s3["v2"]), [str(s3["suite"])]))
    mp = s3["mp"]
    mp.delenv("AWS_ACCESS_KEY_ID")
    mp.delenv("AWS_SECRET_ACCESS_KEY")
    mp.setenv("MODELCI_ARTIFACTS_READONLY", "true")
    options = {"anon": True, "client_kwargs": {"endpoint_url": s3["endpoint"]}}
    mp.setenv("MODELCI_ARTIFACTS_OPTIONS", json.dumps(options))
    mp.setenv("MODELCI_DB", str(tmp_path / "outsider.db"))  # someone outside: the bucket, but not the team's history
    try:
        cfg = config_module.load()
        assert cfg.sources["artifacts_readonly"] == "env:MODELCI_ARTIFACTS_READONLY"
        assert matrix_of(compat.check(cfg, str(s3["v2"]), [str(s3["suite"])])) == expected
        with pytest.raises(UserError, match="read-only"):
            workflow.run(cfg, str(s3["v1"]), [str(s3["suite"])])

        # the bucket is made private: every manifest is unreadable for the outsider, and that fails the check
        s3["client"].delete_bucket_policy(Bucket=BUCKET)
        outcome = compat.check(cfg, str(s3["v2"]), [str(s3["suite"])])
        assert outcome.regressed and outcome.entries
        assert {e.outcome for e in outcome.entries} == {"unreadable"}
        assert all("Forbidden" in e.error or "Access Denied" in e.error for e in outcome.entries), outcome.entries[0]
    finally:
        s3["client"].put_bucket_policy(Bucket=BUCKET, Policy=json.dumps(PUBLIC_READ))
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        for name in ("MODELCI_ARTIFACTS_READONLY", "MODELCI_DB"):
            mp.delenv(name)
        mp.setenv("MODELCI_ARTIFACTS_OPTIONS", json.dumps({"client_kwargs": {"endpoint_url": s3["endpoint"]}}))


def test_bad_storage_options_are_a_user_error(s3):
    with pytest.raises(UserError, match="MODELCI_ARTIFACTS_OPTIONS must be a table"):
        config_module.load(environ={**os.environ, "MODELCI_ARTIFACTS_OPTIONS": "{not json"})
    with pytest.raises(UserError, match="MODELCI_ARTIFACTS_READONLY must be true or false"):
        config_module.load(environ={**os.environ, "MODELCI_ARTIFACTS_READONLY": "perhaps"})
