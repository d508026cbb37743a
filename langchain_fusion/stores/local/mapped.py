"""The files of a loaded folder: small ones read into memory, large ones memory-mapped and watched.

A memory map reads the file as it is now, not as it was at load: a file rewritten in place
(``cp`` of another index over the folder, ``rsync --inplace``, a restored backup) would change
the texts and vectors a serving process returns, and one truncated shorter kills it with
SIGBUS. So a file smaller than :data:`MAP_MIN_BYTES` is read into memory and cannot change.
A larger one is mapped, and :class:`MappedFiles` keeps it open and remembers its size and
modification time; :meth:`MappedFiles.check` compares them (one ``fstat`` per mapped file, a
microsecond or a few) before the store serves a query, and a changed file is one clear
:class:`~langchain_fusion.errors.IndexFormatError` asking for a reload.

The check follows the open file, not the path: a save replaces the whole folder by renaming
(see :mod:`~langchain_fusion.stores.local.saving`), so a loaded index keeps its old, unchanged
files and goes on answering. What no check can catch: a mapped file truncated while a query
is reading it, and one rewritten with its size and modification time kept (``touch -r``).
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np
from numpy.typing import NDArray

from langchain_fusion.errors import IndexFormatError
from langchain_fusion.stores.local import folder as fmt

MAP_MIN_BYTES = 32 << 20
"""Files from this size on are memory-mapped (and watched); smaller ones are read into memory."""


class MappedFiles:
    """The memory-mapped files of one loaded folder, and the check that none changed since."""

    def __init__(self, folder: Path) -> None:
        """Watch nothing yet; :meth:`data` and :meth:`array` add the files they map."""
        self.folder = folder
        self._watched: list[tuple[str, BinaryIO, int, int]] = []  # name, open file, size, mtime_ns
        self._changed: str | None = None
        weakref.finalize(self, _close_all, self._watched)

    def __len__(self) -> int:
        return len(self._watched)

    def data(self, path: Path) -> NDArray[np.uint8]:
        """A plain file's bytes: read, or mapped read-only from :data:`MAP_MIN_BYTES` on."""
        size = path.stat().st_size
        if size < MAP_MIN_BYTES or size == 0:  # an empty file cannot be mapped
            return np.frombuffer(path.read_bytes(), dtype=np.uint8)
        handle = self._open(path)
        return np.asarray(np.memmap(handle, dtype=np.uint8, mode="r"))  # see array()

    def array(self, path: Path, dtype: Any, ndim: int) -> NDArray[Any]:
        """An ``.npy`` array of ``dtype`` (one, or a tuple of allowed ones) and rank ``ndim``, read or mapped."""
        if path.stat().st_size < MAP_MIN_BYTES:
            return fmt.load_array(path, dtype, ndim)
        handle = self._open(path)
        try:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, fortran, found = np.lib.format.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, fortran, found = np.lib.format.read_array_header_2_0(handle)
            else:  # 3.0 only holds structured arrays with non-ASCII field names: none in an index
                raise ValueError(f"unexpected .npy version {version}")
        except (ValueError, OSError, EOFError) as exc:
            raise IndexFormatError(f"{path}: not a readable array ({exc}); rebuild the index") from None
        if found.hasobject:
            raise IndexFormatError(f"{path}: not a readable array (it holds Python objects); rebuild the index")
        fmt.check_array(path, found, len(shape), dtype, ndim)
        count = int(np.prod(shape, dtype=np.int64))
        if handle.tell() + count * found.itemsize != os.fstat(handle.fileno()).st_size:
            raise IndexFormatError(f"{path}: the array's size does not match the file; rebuild the index")
        if count == 0:
            return np.zeros(shape, dtype=found)
        order: Literal["C", "F"] = "F" if fortran else "C"
        mapped = np.memmap(handle, dtype=found, mode="r", shape=shape, order=order, offset=handle.tell())
        # A plain array over the same map (which it keeps alive): each slice of a memmap object runs
        # Python code of its own, about a hundred per query in the BM25 postings.
        return np.asarray(mapped)

    def check(self) -> None:
        """IndexFormatError if a mapped file changed on disk since it was loaded (see the module docstring)."""
        if self._changed is None:
            for name, handle, size, mtime in self._watched:
                now = os.fstat(handle.fileno())
                if now.st_size != size or now.st_mtime_ns != mtime:
                    self._changed = name
                    break
            else:
                return
        raise IndexFormatError(
            f"{self.folder}: {self._changed} changed on disk since it was loaded (the folder's files were "
            "overwritten in place); load the index again, e.g. restart the server. To replace a served index, "
            "save it (or rename a new folder into place) instead of copying files over it."
        )

    def _open(self, path: Path) -> BinaryIO:
        handle = path.open("rb")
        try:
            status = os.fstat(handle.fileno())
        except OSError:
            handle.close()
            raise
        self._watched.append((path.relative_to(self.folder).as_posix(), handle, status.st_size, status.st_mtime_ns))
        return handle


def _close_all(watched: list[tuple[str, BinaryIO, int, int]]) -> None:
    for _, handle, _, _ in watched:
        handle.close()  # the maps hold descriptors of their own
