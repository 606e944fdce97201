"""The artifact store: blobs addressed by their sha256, verified on every read, over fsspec.

A local folder is the default; any URL fsspec opens (s3://, gs://, file://) can serve a team.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem

from modelci.errors import UserError


class CorruptArtifact(UserError):
    """An artifact whose bytes no longer match its address."""


class ArtifactStore:
    """Content-addressed blobs under `root` (`ab/cdef…`); writing the same bytes twice stores them once."""

    def __init__(self, root: str, options: dict[str, Any] | None = None, readonly: bool = False):
        self.root = root.rstrip("/")
        #: fsspec storage options (endpoint, credentials, anon=True for a public bucket), from `artifacts_options`
        self.options = dict(options or {})
        self.readonly = readonly
        self.fs, self.base = fsspec.core.url_to_fs(self.root, **self.options)

    def check_writable(self) -> None:
        """Refuse to write to a store opened read-only, with a message that says what to do."""
        if self.readonly:
            raise UserError(
                f"the artifact store {self.root} is opened read-only (artifacts_readonly = true), so nothing can be "
                "stored in it; `modelci compat` still reads from it. To run and store results, point `artifacts` "
                "(MODELCI_ARTIFACTS) at a store you can write, or unset MODELCI_ARTIFACTS_READONLY"
            )

    def path(self, digest: str) -> str:
        """Where the blob with this digest lives."""
        return f"{self.base}/{digest[:2]}/{digest[2:]}"

    def put(self, data: bytes) -> str:
        """Store `data` and return its sha256; an existing blob is left as it is."""
        self.check_writable()
        digest = hashlib.sha256(data).hexdigest()
        path = self.path(digest)
        if not self.fs.exists(path):
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            # write under a temporary name and move, so a reader never sees half a blob
            tmp = f"{path}.tmp-{uuid.uuid4().hex}"
            with self.fs.open(tmp, "wb") as fh:
                fh.write(data)
            self.fs.mv(tmp, path)
        return digest

    def put_file(self, local_path: str | Path) -> tuple[str, int]:
        """Store a local file, hashed in chunks (a saved model may not fit in memory); returns (sha256, size).

        On a local store the file is hard-linked in when it can be, so the caller hands it over and must not
        change it afterwards (a saved model in a run's scratch folder, deleted after the run); otherwise copied.
        """
        self.check_writable()
        hasher, size = hashlib.sha256(), 0
        with open(local_path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                hasher.update(chunk)
                size += len(chunk)
        digest = hasher.hexdigest()
        path = self.path(digest)
        if not self.fs.exists(path):
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            tmp = f"{path}.tmp-{uuid.uuid4().hex}"
            if isinstance(self.fs, LocalFileSystem):
                try:
                    os.link(local_path, tmp)
                except OSError:  # another filesystem, or links not allowed
                    shutil.copyfile(local_path, tmp)
            else:
                self.fs.put_file(str(local_path), tmp)
            self.fs.mv(tmp, path)
        return digest, size

    def get(self, digest: str) -> bytes:
        """Read a blob and check its sha256 before returning it."""
        path = self.path(digest)
        try:
            # start=0 makes it one ranged GET on S3; without it s3fs first asks for the size (a HEAD): a round
            # trip more per blob, and a request that moto's server refuses to anonymous readers of a public bucket
            data = self.fs.cat_file(path, start=0)
        except FileNotFoundError:
            raise CorruptArtifact(f"artifact {digest[:12]} is missing from {self.root}") from None
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise CorruptArtifact(
                f"artifact {digest[:12]} in {self.root} is corrupt (its bytes hash to {actual[:12]}); "
                "it was not used. Restore it from a backup or re-run the target."
            )
        return data

    def put_array(self, array: Any) -> tuple[str, int]:
        """Store an array as `.npy` (never pickled); returns (sha256, size)."""
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(array), allow_pickle=False)
        data = buffer.getvalue()
        return self.put(data), len(data)

    def get_array(self, digest: str) -> np.ndarray:
        """Load a verified `.npy` blob."""
        return np.load(io.BytesIO(self.get(digest)), allow_pickle=False)
