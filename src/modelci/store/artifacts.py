"""The artifact store: blobs addressed by their sha256, verified on every read, over fsspec.

A local folder is the default; any URL fsspec opens (s3://, gs://, file://) can serve a team.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem

from modelci.errors import CorruptArtifact, HarnessError, UserError

#: the address of the empty blob, which `check_usable` writes to prove the store takes writes
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class ArtifactWriteError(HarnessError):
    """The artifact store could not take an array or a file (a full disk, a folder that cannot be written).
    `what` says what failed, `fix` what to do; the message is both, for a caller that says nothing more."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(f"{what}; {fix}")
        self.what, self.fix = what, fix


class ArtifactStore:
    """Content-addressed blobs under `root` (`ab/cdef…`); writing the same bytes twice stores them once."""

    def __init__(self, root: str, options: dict[str, Any] | None = None, readonly: bool = False):
        self.root = root.rstrip("/")
        #: fsspec storage options (endpoint, credentials, anon=True for a public bucket), from `artifacts_options`
        self.options = dict(options or {})
        self.readonly = readonly
        try:
            self.fs, self.base = fsspec.core.url_to_fs(self.root, **self.options)
        except (ValueError, ImportError, TypeError) as exc:  # an unknown protocol, its package missing, bad options
            raise UserError(f"the artifact store {self.root!r} cannot be opened: {exc}; set `artifacts` "
                            "(MODELCI_ARTIFACTS) to a folder or an fsspec URL such as s3://bucket/prefix") from None

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

    def check_usable(self) -> None:
        """Before a run: that the store can be reached and, unless read-only, written (a UserError if not).

        A mistyped URL, a folder under a file or missing credentials were tracebacks, the last one only after
        every workload had run. Writing the empty blob (content-addressed, so harmless and written once) proves
        the store takes writes, with the credentials the run will use.
        """
        try:
            if self.readonly:
                self.fs.exists(self.path(EMPTY_SHA256))
            else:
                self.put(b"")
        except HarnessError as exc:  # before the run it is the configuration that is wrong: a usage error
            raise UserError(str(exc)) from None
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - fsspec backends raise their own types (botocore, gcsfs, ...)
            raise UserError(f"the artifact store {self.root} cannot be {'read' if self.readonly else 'written'}: "
                            f"{type(exc).__name__}: {exc}; check `artifacts` (MODELCI_ARTIFACTS) and, for a remote "
                            "store, its credentials and `artifacts_options`") from None

    def put(self, data: bytes) -> str:
        """Store `data` and return its sha256. A blob already there is kept when its bytes match its address, and
        written again when they do not: storing the same content again heals a corrupt blob."""
        self.check_writable()
        digest = hashlib.sha256(data).hexdigest()
        path = self.path(digest)
        if not self._intact(path, digest, len(data)):
            # write under a temporary name and move, so a reader never sees half a blob
            tmp = f"{path}.tmp-{uuid.uuid4().hex}"
            with self._writing(tmp):
                self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
                with self.fs.open(tmp, "wb") as fh:
                    fh.write(data)
                self.fs.mv(tmp, path)
        return digest

    def _intact(self, path: str, digest: str, size: int) -> bool:
        """Whether the blob at `path` exists and holds the bytes its address says. On a local store the bytes are
        hashed (a saved model read back at disk speed); on a remote one its size is compared, as a download of
        every blob stored again would cost more than the write it saves."""
        try:
            if isinstance(self.fs, LocalFileSystem):
                hasher = hashlib.sha256()
                with open(path, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        hasher.update(chunk)
                return hasher.hexdigest() == digest
            return self.fs.exists(path) and self.fs.size(path) == size
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return False

    @contextmanager
    def _writing(self, tmp: str) -> Iterator[None]:
        """Remove the temporary file `tmp` if the block fails; a full disk (or any OSError) is an
        ArtifactWriteError (a HarnessError), which the caller tells from other failures: a run's results are
        still stored without their arrays (workflow.py)."""
        try:
            yield
        except BaseException as exc:
            try:
                self.fs.rm_file(tmp)
            except (OSError, FileNotFoundError):
                pass
            if isinstance(exc, OSError):
                full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
                raise ArtifactWriteError(
                    f"could not write to the artifact store {self.root}: "
                    + ("the disk is full" if full else f"{exc.strerror or exc}")
                    + f" ({type(exc).__name__})",
                    "free space there (or point `artifacts` elsewhere) and run again" if full
                    else "check the store's folder and its permissions, and run again",
                ) from None
            raise

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
        if not self._intact(path, digest, size):
            tmp = f"{path}.tmp-{uuid.uuid4().hex}"
            with self._writing(tmp):
                self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
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
