"""The artifact store: blobs addressed by their sha256, verified on every read, over fsspec.

A local folder is the default; any URL fsspec opens (s3://, gs://, file://) can serve a team.
"""

from __future__ import annotations

import hashlib
import io
import uuid
from typing import Any

import fsspec
import numpy as np

from modelci.errors import UserError


class CorruptArtifact(UserError):
    """An artifact whose bytes no longer match its address."""


class ArtifactStore:
    """Content-addressed blobs under `root` (`ab/cdef…`); writing the same bytes twice stores them once."""

    def __init__(self, root: str):
        self.root = root.rstrip("/")
        self.fs, self.base = fsspec.core.url_to_fs(self.root)

    def path(self, digest: str) -> str:
        """Where the blob with this digest lives."""
        return f"{self.base}/{digest[:2]}/{digest[2:]}"

    def put(self, data: bytes) -> str:
        """Store `data` and return its sha256; an existing blob is left as it is."""
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

    def get(self, digest: str) -> bytes:
        """Read a blob and check its sha256 before returning it."""
        path = self.path(digest)
        try:
            with self.fs.open(path, "rb") as fh:
                data = fh.read()
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
