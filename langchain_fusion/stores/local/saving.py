"""Saving a folder crash-safely: a staging folder swapped in atomically, the locks, recovery after a crash.

Saving writes a sibling staging folder, fsyncs it, then swaps it with the target in one step
(``renameat2(RENAME_EXCHANGE)`` on Linux): a crash at any instant leaves the old or the new
index at the path, never nothing. Where the OS has no atomic exchange, the old folder is
renamed aside first, and the next load or save puts it back if a crash came in between. A lock
file beside the folder (``.NAME.lock``) keeps two savers from interleaving, and each save
removes what crashed saves left behind.

A lock file lives only while someone holds or waits for the lock: the last holder removes it (so
an index in a checkout leaves nothing beside it), and a waiter that then gets the lock of a removed
file takes the lock again on the path's current file (:func:`_flocked`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from langchain_fusion.errors import FusionError
from langchain_fusion.stores.local.folder import HIERARCHICAL_FORMAT_NAME, MANIFEST, MAX_MANIFEST_BYTES

LOCK_SUFFIX = ".lock"
"""The lock that saves take (exclusive) and loads (shared): ``.NAME.lock`` beside the folder while held."""
STAGING_MARK = ".saving-"
"""Marks the name of a save's staging folder, ``.NAME.saving-XXXXXXXX`` beside the target."""
_RETIRED_MARK = ".old-"

_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


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
        if not manifest.is_file() or manifest.stat().st_size > MAX_MANIFEST_BYTES:
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
            staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}{STAGING_MARK}", dir=folder.parent))
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
        with _flocked(folder.parent / f".{folder.name}{LOCK_SUFFIX}", exclusive=True):
            yield


UPDATE_LOCK_SUFFIX = ".update.lock"
"""The lock an update of a folder (load, change, save) holds for its whole run: ``.NAME.update.lock`` beside it
while held."""


@contextlib.contextmanager
def update_lock(folder: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Exclusive lock on updating ``folder`` from load to save, across threads and processes.

    A second updater waits (``on_wait`` is called once if it must), then loads what the first saved,
    so no update is lost. Readers and :func:`save_lock` are not involved: serving goes on meanwhile.
    """
    if sys.platform == "win32":  # pragma: no cover - no flock
        yield
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _flocked(folder.parent / f".{folder.name}{UPDATE_LOCK_SUFFIX}", exclusive=True, on_wait=on_wait):
        yield


@contextlib.contextmanager
def load_lock(folder: Path) -> Iterator[None]:
    """Shared lock for reading ``folder``: no save replaces it meanwhile (saves take it exclusively).

    Where the lock file cannot be created (a read-only location), the read goes ahead unlocked:
    nothing can save there either.
    """
    if sys.platform == "win32":  # pragma: no cover - no flock
        yield
        return
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(OSError):
            stack.enter_context(_flocked(folder.parent / f".{folder.name}{LOCK_SUFFIX}", exclusive=False))
        yield


@contextlib.contextmanager
def _flocked(path: Path, *, exclusive: bool, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold ``flock`` on the file ``path`` (created if missing), and remove the file when no one else holds it.

    The holder that finds no other holder when it is done (a non-blocking exclusive lock succeeds) removes the
    file while still holding it. A waiter that was blocked on that file then holds the lock of a file no longer
    at ``path``: it sees so (the inode differs, or nothing is there) and locks the path's current file instead,
    so two holders never lock different files at once. ``on_wait`` is called once if the lock is busy.
    OSErrors of opening or creating the file are raised.
    """
    import fcntl

    operation = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    waited = False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, operation | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait is not None and not waited:
                    on_wait()
                waited = True
                fcntl.flock(fd, operation)
            if _is_file_at(fd, path):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the holder before us removed this file: lock the one now at the path
    try:
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no one else holds or waits to share it
        except OSError:
            pass  # others hold it (or are about to): the last of them removes it
        else:
            with contextlib.suppress(OSError):
                path.unlink()
        os.close(fd)  # closing releases the lock


def _is_file_at(fd: int, path: Path) -> bool:
    """True when the open file ``fd`` is the file at ``path`` now (not one removed or replaced since)."""
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (at_path.st_dev, at_path.st_ino)


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
    for path in _leftovers(folder, STAGING_MARK) + _leftovers(folder, _RETIRED_MARK):
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
