"""Ingestion: load PDF, text and markdown files, clean the text, split it into chunks.

Chunks carry the metadata contract of :mod:`langchain_fusion.metadata` and a stable
``Document.id`` derived from their source, position and text, so re-indexing an unchanged
file gives the same ids. :func:`merge_chunks` is the inverse of the split: it joins
consecutive chunks back into their original text.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter

from langchain_fusion import metadata as keys
from langchain_fusion._checks import check_positive_int
from langchain_fusion.errors import FusionError, InvalidParameterError

logger = logging.getLogger(__name__)

PDF_SUFFIXES = frozenset({".pdf"})
TEXT_SUFFIXES = frozenset({".txt", ".md", ".markdown", ".text"})
SUPPORTED_SUFFIXES = PDF_SUFFIXES | TEXT_SUFFIXES
"""File endings that :func:`load_files` reads."""

DEFAULT_CHUNK_SIZE = 1000
DEFAULT_CHUNK_OVERLAP = 200

PAGE_BREAK = "\n\n"
"""What joins the last chunk of one page to the first chunk of the next page (see :func:`merge_chunks`)."""


class SkippedFileWarning(UserWarning):
    """A file could not be read and was left out; the rest was loaded."""


@dataclass(frozen=True)
class SkippedFile:
    """A file that was left out, and why."""

    path: str
    """The file's path as found."""
    reason: str
    """What was wrong with it, in words a user can act on."""


@dataclass
class LoadResult:
    """What :func:`load_files` read: one Document per PDF page or text file, and the skips."""

    documents: list[Document] = field(default_factory=list)
    """Cleaned pages (PDF) or whole files (text, markdown), in file order."""
    files: list[str] = field(default_factory=list)
    """Paths of the files that were loaded."""
    skipped: list[SkippedFile] = field(default_factory=list)
    """Files that were found but could not be loaded."""
    unsupported: list[str] = field(default_factory=list)
    """Files found in the folders whose type is not read (see :data:`SUPPORTED_SUFFIXES`), by path."""


@dataclass
class FoundFiles:
    """What :func:`find_files` found under the given paths."""

    files: list[Path] = field(default_factory=list)
    """The files to read (supported types), sorted per folder."""
    skipped: list[SkippedFile] = field(default_factory=list)
    """Paths that cannot be read: missing, a folder that cannot be listed or is skipped, an unsupported file named."""
    unsupported: list[str] = field(default_factory=list)
    """Files in the folders whose type is not read, by path (reported, never left out silently)."""


DEFAULT_MAX_FILE_CHARS = 5_000_000
"""Most characters of text one file may yield (about 2,000 dense pages); a file beyond is skipped.

A small PDF can expand to millions of characters (a content stream repeated, or a bomb), and
every character is chunked, embedded and indexed: the bound keeps one file from costing
without limit. Raise it with ``load_files(..., max_chars=...)`` or ``index --max-file-chars``.
"""

_SPACES = re.compile(r"[^\S\n]+")
_SPACE_AROUND_NEWLINE = re.compile(r" *\n *")
_PARAGRAPH_BREAKS = re.compile(r"\n{3,}")


def source_name(path: str | Path) -> str:
    r"""The ``source`` recorded for a file: its path, with bytes that are not UTF-8 shown as ``\xNN``.

    A file name need not be valid UTF-8 on Linux; Python then holds it with lone surrogates,
    which cannot be hashed into ids, saved or printed. The escaped form is readable and unique.
    """
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def valid_unicode(text: str) -> str:
    """``text`` with lone surrogates (which no encoding can write) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def clean_text(text: str) -> str:
    """Normalise whitespace, keeping line and paragraph breaks; replace lone surrogates.

    Tabs and runs of spaces become one space, line ends lose their surrounding spaces, three
    or more newlines become one paragraph break, and the ends are stripped. Lone surrogates
    (a broken PDF text map can produce them) become U+FFFD.
    """
    text = valid_unicode(text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _SPACES.sub(" ", text)
    text = _SPACE_AROUND_NEWLINE.sub("\n", text)
    text = _PARAGRAPH_BREAKS.sub("\n\n", text)
    return text.strip()


def find_files(paths: Iterable[str | Path], skip_folder: Callable[[Path], str | None] | None = None) -> FoundFiles:
    """Expand files and directories (recursively) into supported files, sorted per directory.

    A path that does not exist is reported as skipped, and so is an unsupported file named
    explicitly; unsupported files inside a directory are listed in ``unsupported``. ``skip_folder``
    returns why a folder is not to be searched (e.g. it holds a saved index), or None; a folder
    it names is reported as skipped and nothing under it is loaded.
    """
    result = FoundFiles()
    found, skipped = result.files, result.skipped
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(_walk(path, result, skip_folder))
        elif path.is_file():
            if path.suffix.lower() in SUPPORTED_SUFFIXES:
                found.append(path)
            else:
                supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
                skipped.append(SkippedFile(source_name(path), f"unsupported file type (supported: {supported})"))
        else:
            skipped.append(SkippedFile(source_name(path), "no such file or directory"))
    return result


def _walk(root: Path, result: FoundFiles, skip_folder: Callable[[Path], str | None] | None) -> list[Path]:
    """Supported files under ``root`` in sorted order; the rest (other types, folders not read) noted in ``result``."""
    skipped = result.skipped

    def unreadable(exc: OSError) -> None:
        where = exc.filename if exc.filename is not None else root
        skipped.append(SkippedFile(source_name(where), f"folder cannot be read: {exc.strerror or exc}"))

    found: list[Path] = []
    for folder, dirs, files in os.walk(root, onerror=unreadable):
        reason = skip_folder(Path(folder)) if skip_folder is not None else None
        if reason is not None:
            skipped.append(SkippedFile(source_name(folder), reason))
            dirs[:] = []
            continue
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if path.suffix.lower() in SUPPORTED_SUFFIXES:
                found.append(path)
            else:
                result.unsupported.append(source_name(path))
    return sorted(p for p in found if p.is_file())


def _too_long(max_chars: int) -> FusionError:
    return FusionError(
        f"the file yields more than {max_chars:,} characters of text; if that is expected, raise the limit "
        "(load_files(max_chars=...))"
    )


def load_pdf(path: Path, max_chars: int = DEFAULT_MAX_FILE_CHARS) -> list[Document]:
    """One cleaned Document per non-empty page; raises FusionError if nothing can be read or it is too long."""
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise FusionError("the PDF is encrypted with a password")
        pages = []
        total = 0
        for number, page in enumerate(reader.pages, start=1):
            text = clean_text(page.extract_text() or "")
            total += len(text)
            if total > max_chars:
                raise _too_long(max_chars)
            if text:
                pages.append(Document(page_content=text, metadata={keys.SOURCE: source_name(path), keys.PAGE: number}))
    except FusionError:
        raise
    except DependencyError:
        raise FusionError(
            "the PDF is AES-encrypted and decrypting it needs the cryptography package: pip install cryptography"
        ) from None
    except Exception as exc:  # pypdf raises many types on malformed files; one bad file must not stop the rest
        raise FusionError(f"not a readable PDF ({type(exc).__name__}: {exc})") from None
    if not pages:
        raise FusionError("the PDF has no extractable text (a scanned image? run OCR first)")
    return pages


def load_text(path: Path, max_chars: int = DEFAULT_MAX_FILE_CHARS) -> list[Document]:
    """The whole file as one cleaned Document; raises FusionError if empty, not UTF-8 or too long."""
    if path.stat().st_size > 4 * max_chars + 4:  # UTF-8 needs at most 4 bytes a character: sure to be too long
        raise _too_long(max_chars)
    try:
        text = clean_text(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError:
        raise FusionError("not UTF-8 text") from None
    if not text:
        raise FusionError("the file is empty")
    if len(text) > max_chars:
        raise _too_long(max_chars)
    return [Document(page_content=text, metadata={keys.SOURCE: source_name(path)})]


def load_files(
    paths: Iterable[str | Path],
    *,
    max_chars: int = DEFAULT_MAX_FILE_CHARS,
    skip_folder: Callable[[Path], str | None] | None = None,
) -> LoadResult:
    """Load PDFs, text and markdown from files and directories.

    A file that cannot be read (corrupt, encrypted, empty, not UTF-8, or yielding more than
    ``max_chars`` characters: see :data:`DEFAULT_MAX_FILE_CHARS`) is reported in ``skipped``,
    warned about with :class:`SkippedFileWarning`, and the rest is loaded. ``skip_folder`` as
    for :func:`find_files`.
    """
    max_chars = check_positive_int(max_chars, "max_chars")
    found = find_files(paths, skip_folder)
    files = found.files
    result = LoadResult(skipped=found.skipped, unsupported=found.unsupported)
    pypdf_logger = logging.getLogger("pypdf")
    previous_level = pypdf_logger.level
    pypdf_logger.setLevel(logging.ERROR)  # its warnings on malformed files would duplicate our report
    try:
        _load_each(files, result, max_chars)
    finally:
        pypdf_logger.setLevel(previous_level)
    for skip in result.skipped:
        warnings.warn(f"skipped {skip.path}: {skip.reason}", SkippedFileWarning, stacklevel=2)
    if result.unsupported:
        warnings.warn(unsupported_note(result.unsupported), SkippedFileWarning, stacklevel=2)
    return result


def unsupported_note(paths: Sequence[str], shown: int = 5) -> str:
    """One line for people on the files of types not read: how many, which types, the first few paths."""
    suffixes = sorted({Path(path).suffix.lower() or "no extension" for path in paths})
    names = ", ".join(paths[:shown]) + (f" and {len(paths) - shown} more" if len(paths) > shown else "")
    return (
        f"{len(paths)} file(s) not indexed: their type is not read ({', '.join(suffixes)}; PDF, .txt and .md files "
        f"are): {names}"
    )


def _load_each(files: list[Path], result: LoadResult, max_chars: int) -> None:
    for path in files:
        loader = load_pdf if path.suffix.lower() in PDF_SUFFIXES else load_text
        try:
            docs = loader(path, max_chars)
        except OSError as exc:
            result.skipped.append(SkippedFile(source_name(path), f"cannot be read: {exc.strerror or exc}"))
            continue
        except FusionError as exc:
            result.skipped.append(SkippedFile(source_name(path), str(exc)))
            continue
        result.documents.extend(docs)
        result.files.append(source_name(path))


def chunk_id(source: str, page: int | None, start_index: int, text: str) -> str:
    """Stable id of a chunk: a hash of where it is and what it says."""
    digest = hashlib.sha256(f"{source}\x00{page}\x00{start_index}\x00{text}".encode()).hexdigest()
    return digest[:32]


def check_chunking(chunk_size: int, chunk_overlap: int) -> None:
    """An InvalidParameterError unless ``chunk_size >= 1`` and ``0 <= chunk_overlap < chunk_size``."""
    if chunk_size < 1 or not 0 <= chunk_overlap < chunk_size:
        raise InvalidParameterError(
            f"need chunk_size >= 1 and 0 <= chunk_overlap < chunk_size; got {chunk_size} and {chunk_overlap}"
        )


@dataclass
class Chunks:
    """What :func:`split_into_chunks` made."""

    chunks: list[Document] = field(default_factory=list)
    """The chunks, in order."""
    bounded: int = 0
    """Chunks of ``chunk_size`` characters that had more than ``max_tokens`` tokens and were split again by tokens."""


def split_documents(
    documents: Sequence[Document],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    *,
    max_tokens: int | None = None,
    count_tokens: Callable[[Sequence[str]], list[int]] | None = None,
) -> list[Document]:
    """Split pages or files into chunks with LangChain's RecursiveCharacterTextSplitter.

    Each chunk gets the metadata of its page plus ``chunk_index`` (counting across all pages
    of its source, in order), ``start_index`` (offset within its page's text) and a stable
    ``Document.id``. The input documents are not modified.

    ``max_tokens`` also bounds each chunk in an embedding model's tokens, counted by
    ``count_tokens`` (e.g. ``LocalEmbeddings().count_tokens``): a chunk of ``chunk_size``
    characters with more tokens is split again by tokens (the overlap scaled alike), so text
    with more tokens per character (Chinese, Japanese, code) is embedded whole too.
    :func:`split_into_chunks` also says how many chunks were split so.
    """
    return split_into_chunks(
        documents, chunk_size, chunk_overlap, max_tokens=max_tokens, count_tokens=count_tokens
    ).chunks


def split_into_chunks(
    documents: Sequence[Document],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    *,
    max_tokens: int | None = None,
    count_tokens: Callable[[Sequence[str]], list[int]] | None = None,
) -> Chunks:
    """:func:`split_documents`, with the count of chunks that ``max_tokens`` bounded (split again by tokens)."""
    check_chunking(chunk_size, chunk_overlap)
    if max_tokens is not None:
        check_positive_int(max_tokens, "max_tokens")
        if count_tokens is None:
            raise InvalidParameterError("max_tokens needs count_tokens, the embedding model's token counter")
    splitter = RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap, add_start_index=True)
    next_index: dict[str, int] = {}
    issued: set[str] = set()
    result = Chunks()
    chunks = result.chunks
    for doc in documents:
        source = str(doc.metadata.get(keys.SOURCE, ""))
        pieces = splitter.create_documents([doc.page_content], [dict(doc.metadata)])
        if max_tokens is not None and count_tokens is not None:
            pieces, bounded = _within_tokens(pieces, max_tokens, count_tokens, chunk_overlap * max_tokens // chunk_size)
            result.bounded += bounded
        for chunk in pieces:
            position = next_index.get(source, 0)
            next_index[source] = position + 1
            chunk.metadata[keys.CHUNK_INDEX] = position
            base = chunk_id(source, chunk.metadata.get(keys.PAGE), chunk.metadata[keys.START_INDEX], chunk.page_content)
            # The same text at the same place (e.g. repeated documents without a source) gets
            # a counter folded in, so ids stay unique while unrepeated chunks keep stable ids.
            chunk.id, repeat = base, 0
            while chunk.id in issued:
                repeat += 1
                chunk.id = chunk_id(source, chunk.metadata.get(keys.PAGE), repeat, base)
            issued.add(chunk.id)
            chunks.append(chunk)
    return result


def _within_tokens(
    chunks: list[Document], max_tokens: int, count_tokens: Callable[[Sequence[str]], list[int]], overlap: int
) -> tuple[list[Document], int]:
    """``chunks`` with each one of more than ``max_tokens`` tokens split again by tokens (offsets kept); how many."""
    counts = count_tokens([chunk.page_content for chunk in chunks])
    longer = sum(count > max_tokens for count in counts)
    if not longer:
        return chunks, 0
    by_tokens = RecursiveCharacterTextSplitter(
        chunk_size=max_tokens,
        chunk_overlap=min(overlap, max_tokens - 1),
        length_function=lambda text: count_tokens([text])[0],
        add_start_index=True,
    )
    out: list[Document] = []
    for chunk, count in zip(chunks, counts, strict=True):
        if count <= max_tokens:
            out.append(chunk)
            continue
        start = chunk.metadata[keys.START_INDEX]
        for part in by_tokens.create_documents([chunk.page_content], [dict(chunk.metadata)]):
            part.metadata[keys.START_INDEX] = start + part.metadata[keys.START_INDEX]
            out.append(part)
    return out, longer


# --- merging chunks back into text: the inverse of split_documents -----------------------------


@dataclass(frozen=True)
class _Chunk:
    """One chunk with its position: the text and offsets a merge needs."""

    chunk_index: int
    start: int
    page: Any
    text: str


def _gap(length: int) -> str:
    # The splitter strips the whitespace at a split point. Cleaned text has only ' ', '\n'
    # and '\n\n' between words; a one-character gap is almost always a line break there.
    return "\n" if length == 1 else "\n\n"


def _longest_overlap(tail: str, head: str) -> int:
    """Length of the longest suffix of ``tail`` that is a prefix of ``head``."""
    for size in range(min(len(tail), len(head)), 0, -1):
        if tail.endswith(head[:size]):
            return size
    return 0


def merge_chunks(chunks: Sequence[Document]) -> str:
    """Join consecutive chunks of one source (in ``chunk_index`` order) into one text.

    Chunks of the same page are joined at their ``start_index`` offsets, so the splitter's
    overlap is removed exactly (the result is the page text from the first chunk's start to
    the last chunk's end). A whitespace gap the splitter dropped between two chunks becomes a
    line break; chunks of different pages are joined with a paragraph break. Every chunk
    needs a ``start_index``; if the offsets contradict the texts, the longest textual
    overlap is removed instead.
    """
    parts = [_Chunk(_require_int(d, keys.CHUNK_INDEX), _require_int(d, keys.START_INDEX),
                    d.metadata.get(keys.PAGE), d.page_content) for d in chunks]  # fmt: skip
    if not parts:
        return ""
    text, end, page = parts[0].text, parts[0].start + len(parts[0].text), parts[0].page
    for part in parts[1:]:
        part_end = part.start + len(part.text)
        if part.page != page:
            text += PAGE_BREAK + part.text
        elif part.start >= end:
            text += (_gap(part.start - end) if part.start > end else "") + part.text
        else:
            shared = end - part.start  # characters from this chunk's start already in the text
            if shared <= len(text) and text[len(text) - shared :].startswith(part.text[:shared]):
                text += part.text[shared:]  # nothing when the chunk lies wholly inside the text
            else:
                logger.debug("start_index offsets of chunk %s contradict its text", part.chunk_index)
                text += part.text[_longest_overlap(text, part.text) :]
                part_end = max(part_end, end)
        end = part_end if part.page != page else max(end, part_end)
        page = part.page
    return text


def _require_int(doc: Document, key: str) -> int:
    value = doc.metadata.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FusionError(f"chunk {doc.id!r} has no integer {key!r} in its metadata (got {value!r})")
    return int(value)
