"""The in-process store as a folder: no pickle, checksummed, replaced atomically and crash-safe.

Layout of a saved store (format version 3)::

    manifest.json       format and library version, embeddings id and dimension, vector index
                        settings, analyzer (class and configuration) and BM25 parameters, text
                        fields, counts, the size and sha256 of every other file, and last
                        ``body_sha256``: the sha256 of all that (so an edited setting is refused)
    documents/ids.json  the document ids, one per row, in row order
    documents/texts.txt the rows' page_content, UTF-8, concatenated
    documents/text_offsets.npy      where each row's text starts (and the last one ends), int64
    documents/metadata.jsonl        one compact JSON object per row and line
    documents/metadata_offsets.npy  where each row's line starts, int64
    vectors.npy         the unit vectors, float32, one row per document
    vectors.ann         the approximate FAISS index, when one is configured (FAISS's format)
    bm25/vocabulary.json  the BM25 tokens; position = term id
    bm25/indptr.npy, bm25/rows.npy, bm25/tf.npy, bm25/lengths.npy
                        term postings (CSC: rows of each term and its frequency) and row lengths

Loading reads small files into memory and memory-maps large ones, watching them for changes (see
:mod:`~langchain_fusion.stores.local.mapped`): replace a served folder by saving, never by copying files
over it.

Version 2 kept the documents as one ``documents.jsonl`` of ``{"id", "page_content",
"metadata"}`` records; it is still read (and written as version 3 by the next save).

Saving writes a sibling staging folder, fsyncs it, then swaps it with the target in one step
(``renameat2(RENAME_EXCHANGE)`` on Linux): a crash at any instant leaves the old or the new
index at the path, never nothing. Where the OS has no atomic exchange, the old folder is
renamed aside first, and the next load or save puts it back if a crash came in between. A lock
file beside the folder (``.NAME.lock``) keeps two savers from interleaving, and each save
removes what crashed saves left behind. Loading verifies every checksum and count before it
returns an index: the files are hashed on a thread while they are read and checked (an altered
file is reported as altered, whatever reading it did), and the FAISS graph, whose parser checks
nothing, is read only once every checksum holds. A saved folder is data to be read by this
library only: do not load folders from untrusted sources (they are checked, but not designed as
a security boundary).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, overload

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray

from langchain_fusion.errors import FusionError, IndexFormatError

MANIFEST = "manifest.json"
HIERARCHICAL_FORMAT_NAME = "langchain-fusion-hierarchical-index"
"""The format name of a folder holding two saved stores (chunks and summaries) under one manifest."""
LOCK_SUFFIX = ".lock"
_STAGING_MARK = ".saving-"
_RETIRED_MARK = ".old-"
_MAX_MANIFEST_BYTES = 16 << 20
CHECKSUM = "body_sha256"
"""The manifest field holding the sha256 of the manifest's other fields (see :func:`manifest_checksum`)."""

_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


def library_version() -> str:
    """The installed langchain-fusion version (``0+unknown`` when run from a bare checkout)."""
    from langchain_fusion import __version__

    return __version__


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second (for ``created_at``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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


def manifest_checksum(manifest: Mapping[str, Any]) -> str:
    """Hex sha256 of the manifest's fields but :data:`CHECKSUM`, as canonical JSON (sorted keys, no spaces, ASCII)."""
    body = {key: value for key, value in manifest.items() if key != CHECKSUM}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("ascii")).hexdigest()


def write_manifest(folder: Path, manifest: Mapping[str, Any]) -> None:
    """Write ``manifest.json`` (indented, UTF-8), its own checksum (:data:`CHECKSUM`) last."""
    # Checksum what a reader will parse (tuples become lists, keys strings), not the Python objects given.
    body = json.loads(json.dumps({key: value for key, value in manifest.items() if key != CHECKSUM}))
    text = json.dumps({**body, CHECKSUM: manifest_checksum(body)}, indent=2, ensure_ascii=False) + "\n"
    (folder / MANIFEST).write_text(text, encoding="utf-8")


def saved_index_reason(folder: Path) -> str | None:
    """Why ``folder`` is not a folder of documents: it holds a saved index (or a save's leftovers); else None.

    For indexing folders: an index saved inside the folder it indexes must not index itself.
    """
    if folder.name.startswith(".") and _STAGING_MARK in folder.name:
        return "a langchain-fusion save in progress or left over (not indexed)"
    path = folder / MANIFEST
    if not path.is_file() or path.stat().st_size > _MAX_MANIFEST_BYTES:
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = manifest.get("format") if isinstance(manifest, dict) else None
    if isinstance(name, str) and name.startswith("langchain-fusion"):
        return "a saved langchain-fusion index (not indexed)"
    return None


def read_manifest(folder: Path) -> Any:
    """The parsed ``manifest.json`` of ``folder`` (any JSON value), or IndexFormatError if there is none.

    Puts back an index a crashed save left aside first (see :func:`recover`); do not call it
    while holding :func:`load_lock` on the same folder.
    """
    recover(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise IndexFormatError(f"{folder} is not a folder; give the folder an index was saved to")
    if not path.is_file():
        raise IndexFormatError(f"{folder} is not a langchain-fusion index: {MANIFEST} is missing")
    if path.stat().st_size > _MAX_MANIFEST_BYTES:
        raise IndexFormatError(f"{path} is larger than any manifest this library writes; the index is damaged")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:  # ValueError: bad JSON, bad UTF-8, or an integer of 4,300+ digits
        if isinstance(exc, RecursionError):
            reason = "nested too deeply"
        elif isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
            reason = str(exc)
        else:
            reason = "a number too long to read"
        raise IndexFormatError(f"{path} is not valid JSON ({reason}); the index is damaged, rebuild it") from None


def check_format(
    folder: Path, manifest: Any, name: str, version: int, kind: str, older: Collection[int] = ()
) -> dict[str, Any]:
    """``manifest`` if it is a dict of format ``name`` and ``version`` matching its checksum; else IndexFormatError.

    ``older`` lists the earlier versions the caller still reads. A manifest saved before manifests
    had a checksum (no :data:`CHECKSUM` field) is read as it is.
    """
    if not isinstance(manifest, dict) or manifest.get("format") != name:
        raise IndexFormatError(f"{folder / MANIFEST} is not a langchain-fusion {kind} manifest")
    found: Any = manifest.get("format_version")
    whole = isinstance(found, int) and not isinstance(found, bool)
    if whole and found > version:
        raise IndexFormatError(
            f"{folder} uses {kind} format version {found}, newer than this langchain-fusion "
            f"({library_version()}) reads (version {version}): upgrade langchain-fusion to load it"
        )
    if not whole or (found != version and found not in older):
        raise IndexFormatError(
            f"{folder} uses {kind} format version {found!r}; this langchain-fusion ({library_version()}) "
            f"reads version {version}. Rebuild the index with this version."
        )
    if CHECKSUM in manifest and manifest[CHECKSUM] != manifest_checksum(manifest):
        raise IndexFormatError(
            f"{folder / MANIFEST} was edited after it was saved (its {CHECKSUM} does not match its contents), and "
            "an edited setting would silently change the results: restore the saved manifest, or rebuild the index "
            "(re-index its files)"
        )
    return manifest


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


def require_file(path: Path) -> None:
    """IndexFormatError unless ``path`` is a file."""
    if not path.is_file():
        raise IndexFormatError(f"{path} is missing; the index is incomplete, rebuild it")


# --- documents and arrays ----------------------------------------------------------------------


def write_documents(path: Path, documents: Iterator[Document] | Any) -> int:
    """Write documents as JSON lines; returns how many. Unserialisable metadata is a FusionError."""
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        for doc in documents:
            record = {"id": doc.id, "page_content": doc.page_content, "metadata": doc.metadata}
            try:
                line = json.dumps(record, ensure_ascii=False)
            except (TypeError, ValueError) as exc:
                raise FusionError(
                    f"document {doc.id!r} has metadata that is not JSON-serialisable ({exc}); "
                    "convert it to strings, numbers, lists or dicts before indexing"
                ) from None
            handle.write(line + "\n")
            count += 1
    return count


def read_documents(path: Path) -> list[Document]:
    """Documents written by :func:`write_documents`; IndexFormatError on a bad record."""
    documents = []
    try:
        # Split on "\n" only: JSON text may hold other line separators (U+2028) inside strings.
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise IndexFormatError(f"{path} is not UTF-8 text ({exc.reason}); rebuild the index") from None
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or not isinstance(record.get("id"), str):
                raise ValueError("expected an object with a string id")
            documents.append(
                Document(id=record["id"], page_content=record["page_content"], metadata=record["metadata"])
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, RecursionError) as exc:
            raise IndexFormatError(f"{path}, line {number}: not a valid document record ({exc})") from None
    return documents


def save_bytes(path: Path, data: NDArray[np.uint8]) -> None:
    """Write a byte array as a plain file (written in bounded steps, also from a memory map)."""
    with path.open("wb") as handle:
        for lo in range(0, data.size, 1 << 24):
            handle.write(np.ascontiguousarray(data[lo : lo + (1 << 24)]).tobytes())


def save_array(path: Path, array: NDArray[Any]) -> None:
    """Write one array as ``.npy`` (never with pickled objects)."""
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def load_array(path: Path, dtype: Any, ndim: int) -> NDArray[Any]:
    """Read an ``.npy`` array into memory, checking dtype and rank (see :func:`check_array`)."""
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise IndexFormatError(f"{path}: not a readable array ({exc}); rebuild the index") from None
    check_array(path, array.dtype, array.ndim, dtype, ndim)
    return np.asarray(array)


def check_array(path: Path, found: np.dtype[Any], found_ndim: int, dtype: Any, ndim: int) -> None:
    """IndexFormatError unless an array of ``found`` values and rank ``found_ndim`` is of ``dtype`` and ``ndim``.

    ``dtype`` is one dtype or a tuple of the allowed ones.
    """
    if found not in (np.dtype(d) for d in (dtype if isinstance(dtype, tuple) else (dtype,))):
        raise IndexFormatError(f"{path} holds {found} values, expected {dtype}; the index is damaged")
    if found_ndim != ndim:
        raise IndexFormatError(f"{path} has {found_ndim} dimensions, expected {ndim}; the index is damaged")


# --- crash-safe replacement --------------------------------------------------------------------


def check_save_target(folder: Path) -> Path:
    """The absolute target, or FusionError if an index cannot be saved there.

    Refused: a target that exists and is not an index (it would be overwritten), a target
    under a file, and a place where nothing can be written (permissions, a read-only file
    system). Commands call it before any embedding or chat-model work.
    """
    folder = folder.expanduser().absolute()
    owner = _hierarchical_owner(folder)
    if owner is not None:
        raise FusionError(
            f"{folder} is part of the index with page summaries at {owner}: saved alone, it would no longer match "
            f"{owner}'s checksums. Load {owner} (HierarchicalIndex.load), change it there, and save {owner}."
        )
    if folder.exists() and (not folder.is_dir() or (not (folder / MANIFEST).is_file() and any(folder.iterdir()))):
        raise FusionError(
            f"{folder} exists and is not a langchain-fusion index; refusing to overwrite it. "
            "Choose a new folder or remove it first."
        )
    existing = folder.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise FusionError(f"cannot save the index to {folder}: {existing} is a file, not a folder")
    try:  # the one reliable test of writability (permissions, ACLs, read-only mounts): write something
        with tempfile.TemporaryFile(dir=existing, prefix=".langchain-fusion-probe-"):
            pass
    except OSError as exc:
        raise FusionError(
            f"cannot save the index to {folder}: cannot write in {existing} ({exc.strerror or exc})"
        ) from None
    return folder


def _hierarchical_owner(folder: Path) -> Path | None:
    """The hierarchical index folder ``folder`` is a part of (its ``chunks`` or ``summaries``), or None."""
    manifest = folder.parent / MANIFEST
    try:
        if not manifest.is_file() or manifest.stat().st_size > _MAX_MANIFEST_BYTES:
            return None
        saved = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(saved, dict) or saved.get("format") != HIERARCHICAL_FORMAT_NAME:
        return None
    parts = saved.get("parts")
    named = (
        {part.get("folder") for part in parts.values() if isinstance(part, dict)} if isinstance(parts, dict) else set()
    )
    return folder.parent if folder.name in named else None


def save_folder(folder: Path, write: Callable[[Path], None]) -> Path:
    """Run ``write`` on a staging folder beside ``folder``, then put it in place atomically.

    See the module docstring for the guarantees. OS errors become FusionErrors naming the path.
    """
    folder = check_save_target(folder)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with save_lock(folder):
            recover(folder, locked=True)
            clean_leftovers(folder)
            staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}{_STAGING_MARK}", dir=folder.parent))
            try:
                staging.chmod(_default_folder_mode())  # mkdtemp makes it private; an index is not a secret
                write(staging)
                _fsync_tree(staging)
                _publish(staging, folder)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
    except OSError as exc:
        raise FusionError(f"cannot save the index to {folder}: {exc.strerror or exc}") from None
    return folder


@contextlib.contextmanager
def save_lock(folder: Path) -> Iterator[None]:
    """Exclusive lock on saving ``folder``, across threads and processes (``.NAME.lock`` beside it)."""
    key = str(folder)
    with _thread_locks_guard:
        thread_lock = _thread_locks.setdefault(key, threading.Lock())
    with thread_lock:
        if sys.platform == "win32":  # pragma: no cover - no flock; threads are still serialised
            yield
            return
        import fcntl

        lock_path = folder.parent / f".{folder.name}{LOCK_SUFFIX}"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock


UPDATE_LOCK_SUFFIX = ".update.lock"
"""The lock an update of a folder (load, change, save) holds for its whole run: ``.NAME.update.lock`` beside it."""


@contextlib.contextmanager
def update_lock(folder: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Exclusive lock on updating ``folder`` from load to save, across threads and processes.

    A second updater waits (``on_wait`` is called once if it must), then loads what the first saved,
    so no update is lost. Readers and :func:`save_lock` are not involved: serving goes on meanwhile.
    """
    if sys.platform == "win32":  # pragma: no cover - no flock
        yield
        return
    import fcntl

    folder.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder.parent / f".{folder.name}{UPDATE_LOCK_SUFFIX}", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def load_lock(folder: Path) -> Iterator[None]:
    """Shared lock for reading ``folder``: no save replaces it meanwhile (saves take it exclusively).

    Where the lock file cannot be created (a read-only location), the read goes ahead unlocked:
    nothing can save there either.
    """
    if sys.platform == "win32":  # pragma: no cover - no flock
        yield
        return
    import fcntl

    lock_path = folder.parent / f".{folder.name}{LOCK_SUFFIX}"
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def recover(folder: Path, *, locked: bool = False) -> None:
    """Put back an index that a crash between the two renames of a non-atomic save left aside."""
    if folder.exists() or not folder.parent.is_dir():
        return
    retired = _leftovers(folder, _RETIRED_MARK)
    if not retired:
        return
    if not locked:
        with save_lock(folder):
            recover(folder, locked=True)
        return
    for candidate in sorted(retired, key=lambda p: p.stat().st_mtime, reverse=True):
        if (candidate / MANIFEST).is_file():
            candidate.rename(folder)
            _fsync_dir(folder.parent)
            return


def clean_leftovers(folder: Path) -> None:
    """Remove staging and retired folders of crashed saves of ``folder`` (call under the lock)."""
    for path in _leftovers(folder, _STAGING_MARK) + _leftovers(folder, _RETIRED_MARK):
        shutil.rmtree(path, ignore_errors=True)


def _leftovers(folder: Path, mark: str) -> list[Path]:
    # Exactly what tempfile.mkdtemp made for this folder: not a sibling index whose name extends ours.
    pattern = re.compile(re.escape(f".{folder.name}{mark}") + r"[a-z0-9_]{8}")
    try:
        return [p for p in folder.parent.iterdir() if pattern.fullmatch(p.name) and p.is_dir()]
    except OSError:
        return []


def _publish(staging: Path, folder: Path) -> None:
    if not folder.exists():
        staging.rename(folder)
        _fsync_dir(folder.parent)
        return
    if _exchange(staging, folder):
        _fsync_dir(folder.parent)
        shutil.rmtree(staging, ignore_errors=True)  # it now holds the previous index
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{folder.name}{_RETIRED_MARK}", dir=folder.parent))
    retired.rmdir()
    folder.rename(retired)
    try:
        staging.rename(folder)
    except BaseException:
        retired.rename(folder)  # put the previous index back
        raise
    _fsync_dir(folder.parent)
    shutil.rmtree(retired, ignore_errors=True)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2``); False where the OS or filesystem cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
        elif path.is_dir():
            _fsync_dir(path)
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    if sys.platform == "win32":  # pragma: no cover - directories cannot be opened there
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _default_folder_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o777 & ~umask
