"""The record of a saved folder's files: each one's size and sha256, listed in the manifest and checked on load.

Loading verifies every checksum and count before it returns an index: the files are hashed on a
thread while they are read and checked (:class:`PendingChecksums`; an altered file is reported as
altered, whatever reading it did), and the FAISS graph, whose parser checks nothing, is read only
once every checksum holds.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, overload

from langchain_fusion.errors import IndexFormatError
from langchain_fusion.stores.local.folder import MANIFEST, require_file


@overload
def sha256_file(path: Path) -> str: ...
@overload
def sha256_file(path: Path, stop: threading.Event) -> str | None: ...
def sha256_file(path: Path, stop: threading.Event | None = None) -> str | None:
    """Hex sha256 of a file's bytes; None if ``stop`` is set before the last block is read."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            if stop is not None and stop.is_set():
                return None
            digest.update(block)
    return digest.hexdigest()


def file_entries(folder: Path) -> dict[str, dict[str, Any]]:
    """``{relative path: {"sha256", "bytes"}}`` for every file under ``folder`` but its manifest."""
    return {
        path.relative_to(folder).as_posix(): {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.relative_to(folder).as_posix() != MANIFEST
    }


def check_file_list(folder: Path, manifest: Mapping[str, Any], allowed: Callable[[str], bool]) -> dict[str, Path]:
    """The manifest's files checked against the disk by name, kind and size, not yet by checksum: name -> path.

    ``allowed`` says which relative names this format may contain, so a manifest can never
    make the loader open a file outside the folder.
    """
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise IndexFormatError(f"{folder / MANIFEST} has no valid file list; the index is damaged, rebuild it")
    paths = {}
    for name, expected in files.items():
        if not isinstance(name, str) or not allowed(name) or not isinstance(expected, dict):
            raise IndexFormatError(f"{folder / MANIFEST} lists an unexpected file {name!r}; the index is damaged")
        path = folder / name
        if path.is_symlink() or any(  # each sub-folder, as a path under the index folder (not the working one)
            (folder / parent).is_symlink() for parent in path.relative_to(folder).parents if str(parent) != "."
        ):
            raise IndexFormatError(f"{path} is a symbolic link; a saved index holds only its own files")
        require_file(path)
        size = path.stat().st_size
        if size != expected.get("bytes"):
            raise IndexFormatError(
                f"{path} has {size} bytes, the manifest says {expected.get('bytes')!r}: "
                "the file is truncated or altered; rebuild the index"
            )
        paths[name] = path
    return paths


class PendingChecksums:
    """The checksums of a folder's files (from :func:`check_file_list`), computed on a thread of their own.

    A load reads and checks the files while they are hashed: hashing and reading release the GIL,
    so on two cores the load takes about as long as the hashing alone. Whatever the reader finds
    is reported only after :meth:`wait`: an altered file is the cause to name, not what it made
    the reader see. Code that must not see unverified bytes (a FAISS graph file) waits first.
    """

    def __init__(self, paths: Mapping[str, Path], manifest: Mapping[str, Any]) -> None:
        """Start hashing ``paths`` (largest first) against the manifest's ``sha256`` entries."""
        files = manifest["files"]
        self._expected = sorted(
            ((path, files[name].get("sha256")) for name, path in paths.items()),
            key=lambda item: -item[0].stat().st_size,
        )
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._done = False

    def start(self) -> PendingChecksums:
        """Begin hashing on a daemon thread; returns self (without it, :meth:`wait` hashes in the calling thread)."""
        self._thread = threading.Thread(target=self._run, name="fusion-checksums", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            for path, sha256 in self._expected:
                digest = sha256_file(path, self._stop)
                if digest is None:
                    return
                if digest != sha256:
                    raise _altered(path)
        except BaseException as exc:  # re-raised by wait() in the loading thread
            self._failure = exc

    def wait(self) -> None:
        """Block until every file is hashed; raises IndexFormatError naming the first altered file (or the OSError)."""
        if not self._done:
            if self._thread is None:
                self._run()
            else:
                self._thread.join()
            self._done = True
        if self._failure is not None:
            raise self._failure

    def cancel(self) -> None:
        """Stop hashing (the load was interrupted, e.g. Ctrl-C): the thread ends within one block, unwaited."""
        self._stop.set()


def check_checksum(path: Path, sha256: Any) -> None:
    """IndexFormatError unless the file's sha256 is ``sha256``."""
    if sha256_file(path) != sha256:
        raise _altered(path)


def _altered(path: Path) -> IndexFormatError:
    """The error of a file whose bytes are not those its manifest recorded."""
    return IndexFormatError(f"{path} does not match its checksum: the file is altered; rebuild the index")
