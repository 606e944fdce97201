"""The backward-compatibility records: saved models and compat results.

A saved model lives in two places. Its manifest is written into the artifact store, next to the blobs it
names (`saved-models/<key>.json`), so that anyone who can read the store can check against it, a read-only
public bucket included; the `saved_models` table mirrors it for queries. `compat_results` keeps every
check as history. Nothing here is rewritten: a manifest with the same key is stored once.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, Integer, Text, select
from sqlalchemy.orm import Mapped, mapped_column

from modelci.errors import UserError
from modelci.records import redacted_json
from modelci.store.schema import Base, String, utcnow

#: version of the manifest files written now; a reader refuses any but these (MANIFEST_KEYS)
MANIFEST_SCHEMA = "modelci.saved-model/2"
#: folder of the manifests inside the artifact store (blobs live in two-character folders, so no clash)
INDEX = "saved-models"
#: the manifest fields that make two records the same saved model; the date, the machine and the run do not
KEY_FIELDS = ("schema", "producer", "workload", "format", "sha256", "layout", "seed", "code_hash", "inputs",
              "outputs", "suite", "file", "framework", "requires", "unsafe", "size")
#: the hashed fields of each manifest version a reader takes. Version 1 left out what compat acts on besides the
#: bytes: the requirements it installs into the consumer (`requires`), the file it imports (`file`, `suite`),
#: the framework helper, whether the format executes code on load (`unsafe`) and the size; a change to any of
#: them (a corrupt or edited manifest) went unseen. A version 1 manifest is still read, those fields unverified
#: (compat checks `file` on its own); a run of its producer writes it again as version 2.
MANIFEST_KEYS = {"modelci.saved-model/1": KEY_FIELDS[:10], MANIFEST_SCHEMA: KEY_FIELDS}
#: the target fields that identify a producer build (a wheel path or spec differs between machines)
IDENTITY = ("kind", "name", "version", "commit", "wheel_sha256")


class SavedModelRow(Base):
    """A model saved by one producer build in one format, with what it must reproduce (mirror of a manifest)."""

    __tablename__ = "saved_models"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    producer_kind: Mapped[str] = mapped_column(String(16), default="")
    producer_name: Mapped[str] = mapped_column(String(200), index=True)
    producer_version: Mapped[str] = mapped_column(String(100), default="")
    producer_commit: Mapped[str] = mapped_column(String(64), default="")
    producer_wheel_sha256: Mapped[str] = mapped_column(String(64), default="")
    producer_label: Mapped[str] = mapped_column(Text, default="")
    workload: Mapped[str] = mapped_column(String(300), index=True)
    code_hash: Mapped[str] = mapped_column(String(64), default="")
    format: Mapped[str] = mapped_column(String(64))
    layout: Mapped[str] = mapped_column(String(8), default="file")
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(Integer, default=0)
    unsafe: Mapped[bool] = mapped_column(Boolean, default=False)
    seed: Mapped[int] = mapped_column(Integer, default=0)
    inputs: Mapped[dict] = mapped_column(JSON, default=dict)
    outputs: Mapped[dict] = mapped_column(JSON, default=dict)
    fingerprint: Mapped[dict] = mapped_column(JSON, default=dict)
    environment_id: Mapped[str] = mapped_column(String(64), default="")
    result_id: Mapped[int | None] = mapped_column(ForeignKey("results.id"), nullable=True)
    recorded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CompatResultRow(Base):
    """One (producer, consumer, workload, format) outcome of one `modelci compat` check."""

    __tablename__ = "compat_results"
    id: Mapped[int] = mapped_column(primary_key=True)
    check_id: Mapped[str] = mapped_column(String(32), index=True)
    direction: Mapped[str] = mapped_column(String(16))
    runner: Mapped[str] = mapped_column(String(200), default="")
    consumer_name: Mapped[str] = mapped_column(String(200), index=True)
    consumer_version: Mapped[str] = mapped_column(String(100), default="")
    consumer_label: Mapped[str] = mapped_column(Text, default="")
    producer_name: Mapped[str] = mapped_column(String(200), default="")
    producer_version: Mapped[str] = mapped_column(String(100), default="")
    producer_label: Mapped[str] = mapped_column(Text, default="")
    workload: Mapped[str] = mapped_column(String(300), index=True)
    format: Mapped[str] = mapped_column(String(64), default="")
    saved_model_key: Mapped[str] = mapped_column(String(64), default="")
    model_sha256: Mapped[str] = mapped_column(String(64), default="")
    outcome: Mapped[str] = mapped_column(String(24))
    gating: Mapped[bool] = mapped_column(Boolean, default=True)
    unsafe: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str] = mapped_column(Text, default="")
    numbers: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


TABLES = [SavedModelRow.__table__, CompatResultRow.__table__]


def ensure_tables(engine: Any) -> None:
    """Create the compat tables in a history made before they existed (adding tables changes no old row)."""
    Base.metadata.create_all(engine, tables=TABLES, checkfirst=True)


# -- saved models as blobs -------------------------------------------------------------------------


def pack(path: Path) -> tuple[bytes, str]:
    """A saved model as bytes and its layout: a file as it is ("file"), a folder as a tar ("tar").

    The tar holds the files in name order with fixed times, owners and modes, so the same folder always
    gives the same bytes and therefore the same sha256 (and is stored once).
    """
    path = Path(path)
    if path.is_file():
        return path.read_bytes(), "file"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for item in sorted(path.rglob("*")):
            relative = item.relative_to(path).as_posix()
            if item.is_symlink():
                raise UserError(f"saved model folder {path} holds a link ({relative}); a workload's `save` must "
                                "write real files, so that what is stored is what loads")
            info = tarfile.TarInfo(relative)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if item.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)
            else:
                data = item.read_bytes()
                info.size, info.mode = len(data), 0o644
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue(), "tar"


def unpack(data: bytes, layout: str, folder: Path, name: str) -> Path:
    """Write a verified saved model under `folder` as the file or folder `name`, and return its path.

    A tar is extracted with the "data" filter, which refuses absolute paths, `..`, links out of the folder and
    device files: the bytes match their sha256, but the store they came from may be anyone's.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if layout == "file":
        path.write_bytes(data)
        return path
    if layout != "tar":
        raise ValueError(f"unknown saved-model layout {layout!r}")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        archive.extractall(path, filter="data")
    return path


# -- manifests in the artifact store ---------------------------------------------------------------


def identity(producer: dict[str, Any]) -> dict[str, str]:
    """The fields of a producer target that identify its build, with None as ""."""
    return {k: str(producer.get(k) or "") for k in IDENTITY}


def manifest_key(manifest: dict[str, Any]) -> str:
    """The sha256 of the fields that make a saved model what it is (those of its version, MANIFEST_KEYS; the
    producer by identity)."""
    fields = {k: manifest.get(k) for k in MANIFEST_KEYS.get(manifest.get("schema"), KEY_FIELDS)}
    fields["producer"] = identity(manifest.get("producer") or {})
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def seal(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with its schema version and its key."""
    sealed = dict(manifest, schema=MANIFEST_SCHEMA)
    sealed["key"] = manifest_key(sealed)
    return sealed


def write_manifest(artifacts: Any, manifest: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Write a manifest under its key unless that key is stored already; returns it sealed, and whether it was new."""
    artifacts.check_writable()
    manifest = seal(redacted_json(manifest))  # kept with the artifacts, and shown: no password of a spec
    folder = f"{artifacts.base}/{INDEX}"
    path = f"{folder}/{manifest['key']}.json"
    if artifacts.fs.exists(path):
        return manifest, False
    artifacts.fs.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with artifacts.fs.open(tmp, "wb") as fh:
        fh.write(json.dumps(manifest, sort_keys=True, separators=(",", ":"), default=str).encode())
    # a reader lists only *.json, so it never sees half a manifest
    artifacts.fs.mv(tmp, path)
    return manifest, True


def read_manifests(artifacts: Any) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Every manifest in the store, and one problem per manifest that cannot be read or does not verify.

    A problem is reported, never skipped: the caller turns it into a finding.
    """
    folder = f"{artifacts.base}/{INDEX}"
    artifacts.fs.invalidate_cache(folder)
    try:
        paths = sorted(p for p in artifacts.fs.ls(folder, detail=False) if p.endswith(".json"))
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [{"path": folder, "error": f"cannot list the saved models in {artifacts.root}: {exc}"}]
    contents = artifacts.fs.cat(paths, on_error="return") if paths else {}
    manifests, problems = [], []
    for path in paths:
        data = contents.get(path) if isinstance(contents, dict) else contents
        name = path.rsplit("/", 1)[-1][: -len(".json")]
        if isinstance(data, BaseException) or data is None:
            problems.append({"path": path, "error": f"cannot read manifest {name[:12]}: {data}"})
            continue
        try:
            manifest = json.loads(data)
        except ValueError as exc:
            problems.append({"path": path, "error": f"manifest {name[:12]} is not JSON ({exc}); it was not used"})
            continue
        if not isinstance(manifest, dict) or manifest.get("schema") not in MANIFEST_KEYS:
            schema = manifest.get("schema") if isinstance(manifest, dict) else None
            problems.append({"path": path, "error": f"manifest {name[:12]} has schema {schema!r}, this modelci reads "
                                                   f"{' and '.join(map(repr, MANIFEST_KEYS))}; use a matching "
                                                   "modelci"})
            continue
        if manifest.get("key") != name or manifest_key(manifest) != name:
            problems.append({"path": path, "error": f"manifest {name[:12]} is corrupt: its fields do not hash to its "
                                                   "name; it was not used. Restore it from a backup or re-run the "
                                                   "producer"})
            continue
        manifests.append(manifest)
    return manifests, problems


# -- the tables ------------------------------------------------------------------------------------


def add_saved_models(session: Any, manifests: list[dict[str, Any]]) -> None:
    """Mirror manifests into `saved_models`, skipping the keys that are there already (one query for all)."""
    keys = [m["key"] for m in manifests]
    known = set(session.scalars(select(SavedModelRow.key).where(SavedModelRow.key.in_(keys)))) if keys else set()
    for manifest in manifests:
        if manifest["key"] in known:
            continue
        known.add(manifest["key"])
        producer = manifest["producer"]
        session.add(SavedModelRow(
            key=manifest["key"], producer_kind=producer.get("kind") or "", producer_name=producer.get("name") or "",
            producer_version=producer.get("version") or "", producer_commit=producer.get("commit") or "",
            producer_wheel_sha256=producer.get("wheel_sha256") or "", producer_label=producer.get("label") or "",
            workload=manifest["workload"], code_hash=manifest.get("code_hash") or "", format=manifest["format"],
            layout=manifest["layout"], sha256=manifest["sha256"], size=int(manifest.get("size") or 0),
            unsafe=bool(manifest.get("unsafe")), seed=int(manifest.get("seed") or 0),
            inputs=manifest.get("inputs") or {}, outputs=manifest.get("outputs") or {},
            fingerprint=manifest.get("fingerprint") or {}, environment_id=manifest.get("environment") or "",
            result_id=manifest.get("result_id"),
        ))


def add_compat_results(session: Any, check_id: str, runner: str, entries: list[Any]) -> None:
    """Keep the entries of one compat check as history."""
    for e in entries:
        session.add(CompatResultRow(
            check_id=check_id, direction=e.direction, runner=runner, consumer_name=e.consumer.get("name") or "",
            consumer_version=e.consumer.get("version") or "", consumer_label=e.consumer.get("label") or "",
            producer_name=e.producer.get("name") or "", producer_version=e.producer.get("version") or "",
            producer_label=e.producer.get("label") or "", workload=e.workload, format=e.format,
            saved_model_key=e.key, model_sha256=e.sha256, outcome=e.outcome, gating=e.gating, unsafe=e.unsafe,
            error=e.error, numbers=e.numbers,
        ))


def saved_models(session: Any, producer_name: str | None = None) -> list[SavedModelRow]:
    """The mirrored saved models, oldest first, optionally of one framework."""
    stmt = select(SavedModelRow).order_by(SavedModelRow.recorded_at, SavedModelRow.id)
    if producer_name:
        stmt = stmt.where(SavedModelRow.producer_name == producer_name)
    return list(session.scalars(stmt))


def compat_history(session: Any, workload: str | None = None, limit: int = 1000) -> list[CompatResultRow]:
    """Stored compat outcomes, newest first, optionally of one workload."""
    stmt = select(CompatResultRow).order_by(CompatResultRow.id.desc()).limit(limit)
    if workload:
        stmt = stmt.where(CompatResultRow.workload == workload)
    return list(session.scalars(stmt))
