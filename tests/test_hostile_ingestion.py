"""Hostile ingestion: odd file names, broken text, unreadable folders and missing paths lose nothing good."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document

from langchain_fusion import FusionError, FusionIndex, InvalidParameterError, load_files
from langchain_fusion import metadata as keys
from langchain_fusion.index.sync import sync_files
from langchain_fusion.index.sync_spec import SyncSpec
from langchain_fusion.ingest.loading import clean_text, find_files, source_name, valid_unicode
from tests.helpers.embeddings import HashingEmbeddings

LATIN1_NAME = b"r\xe9sum\xe9 \xff.txt"  # a Latin-1 file name: not UTF-8


@pytest.fixture
def odd_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.txt").write_text("The NX-14 cabinet stores 14 kWh.", encoding="utf-8")
    try:
        with open(os.fsencode(folder) + b"/" + LATIN1_NAME, "wb") as handle:
            handle.write(b"The GC-9 controller reboots nightly.")
    except (OSError, UnicodeError):
        pytest.skip("this file system does not accept file names that are not UTF-8")
    return folder


class TestFileNames:
    def test_a_name_that_is_not_utf8_is_indexed_under_a_readable_source(self, odd_folder: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing is skipped
            loaded = load_files([odd_folder])
        sources = sorted(d.metadata[keys.SOURCE] for d in loaded.documents)
        assert sources == [str(odd_folder / "good.txt"), f"{odd_folder}/r\\xe9sum\\xe9 \\xff.txt"]
        for source in sources:
            source.encode("utf-8")  # printable, hashable, saveable

    def test_it_survives_save_load_and_incremental_sync(self, odd_folder: Path, tmp_path: Path) -> None:
        index = FusionIndex(HashingEmbeddings())
        record: dict[str, Any] = {}
        spec = SyncSpec(paths=[odd_folder], chunk_size=200, chunk_overlap=0)
        first = sync_files(index, spec, record)
        assert len(first.files_added) == 2 and not first.skipped
        index.save(tmp_path / "idx", info={"files": record})
        again = FusionIndex.load(tmp_path / "idx", HashingEmbeddings())
        second = sync_files(again, spec, dict(again.saved_info["files"]))
        assert len(second.files_unchanged) == 2 and second.chunks_embedded == 0
        assert any("GC-9" in d.page_content for d in again.as_retriever(k=1).invoke("GC-9 controller"))

    def test_source_name_escapes_only_what_is_not_utf8(self) -> None:
        assert source_name("/data/café.pdf") == "/data/café.pdf"
        assert source_name(Path(os.fsdecode(b"/data/\xff.pdf"))) == "/data/\\xff.pdf"


class TestBrokenText:
    def test_lone_surrogates_become_replacement_characters(self) -> None:
        assert valid_unicode("a \ud800 b \udfff") == "a \ufffd b \ufffd"
        assert valid_unicode("plain \U0001f600") == "plain \U0001f600"
        assert clean_text("page\t\ud83d text") == "page \ufffd text"

    @pytest.mark.parametrize(
        ("document", "where"),
        [
            (Document(page_content="bad \ud800 text"), "page_content"),
            (Document(page_content="ok", metadata={"title": "x\udcff"}), "metadata"),
            (Document(page_content="ok", metadata={"k\ud800": 1}), "metadata"),
            (Document(page_content="ok", metadata={"authors": [{"name": "\udfff"}]}), "metadata"),
            (Document(id="id-\ud800", page_content="ok"), "id"),
        ],
    )
    def test_documents_with_lone_surrogates_are_refused_with_the_place(self, document: Document, where: str) -> None:
        good = Document(page_content="a good document")
        with pytest.raises(InvalidParameterError, match=rf"document 1 of this batch: its {where} holds a lone"):
            FusionIndex.from_documents([good, document], HashingEmbeddings())
        index = FusionIndex.from_documents([good], HashingEmbeddings())
        with pytest.raises(InvalidParameterError):
            index.add_documents([document])
        assert len(index) == 1  # the good document is kept


class TestFolders:
    def test_an_unreadable_sub_folder_is_reported_not_omitted(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        (tmp_path / "open").mkdir()
        (tmp_path / "open" / "a.txt").write_text("readable", encoding="utf-8")
        (tmp_path / "locked").mkdir()
        (tmp_path / "locked" / "b.txt").write_text("hidden", encoding="utf-8")
        real_scandir = os.scandir

        def scandir(path: Any = ".") -> Any:  # root may read anything: simulate a permission error
            if Path(path).name == "locked":
                raise PermissionError(13, "Permission denied", str(path))
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", scandir)
        listed = find_files([tmp_path])
        assert [p.name for p in listed.files] == ["a.txt"]
        assert [(s.path, s.reason) for s in listed.skipped] == [
            (str(tmp_path / "locked"), "folder cannot be read: Permission denied")
        ]

    def test_files_come_in_sorted_order_across_sub_folders(self, tmp_path: Path) -> None:
        for name in ("b/z.txt", "a/y.md", "c.txt", "a/b/x.txt"):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_text("x", encoding="utf-8")
        found = find_files([tmp_path]).files
        assert found == sorted(found)
        assert len(found) == 4


class TestFromFiles:
    def test_a_missing_path_is_an_error_before_any_work(self, tmp_path: Path) -> None:
        (tmp_path / "a.txt").write_text("text", encoding="utf-8")
        with pytest.raises(FusionError, match="no such file or directory: nope/"):
            FusionIndex.from_files(["nope/"], HashingEmbeddings())
        with pytest.raises(FusionError, match="no such file or directory"):
            FusionIndex.from_files([tmp_path / "a.txt", tmp_path / "missing.pdf"], HashingEmbeddings())

    def test_nothing_readable_is_an_error_that_says_why(self, tmp_path: Path) -> None:
        (tmp_path / "empty.txt").write_text("", encoding="utf-8")
        (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\xfa")
        with pytest.warns(UserWarning), pytest.raises(FusionError, match=r"no readable documents .*the file is empty"):
            FusionIndex.from_files([tmp_path], HashingEmbeddings())
        (tmp_path / "img.png").write_bytes(b"png")
        only_images = tmp_path / "images"
        only_images.mkdir()
        with pytest.raises(FusionError, match=r"no PDF, \.txt or \.md files"):
            FusionIndex.from_files([only_images], HashingEmbeddings())

    def test_one_path_as_a_string_is_accepted(self, tmp_path: Path) -> None:
        (tmp_path / "a.txt").write_text("text about batteries", encoding="utf-8")
        assert len(FusionIndex.from_files(str(tmp_path / "a.txt"), HashingEmbeddings())) == 1


class TestEncryptedPdfs:
    DATA = Path(__file__).resolve().parent.parent / "data" / "arden-microgrids-report.pdf"

    def _encrypted(self, tmp_path: Path, user_password: str, algorithm: str) -> Path:
        from pypdf import PdfReader, PdfWriter

        writer = PdfWriter()
        for page in PdfReader(self.DATA).pages[:2]:
            writer.add_page(page)
        writer.encrypt(user_password=user_password, owner_password="owner-secret", algorithm=algorithm)
        path = tmp_path / f"{algorithm}-{bool(user_password)}.pdf"
        writer.write(path)
        return path

    @pytest.mark.parametrize("algorithm", ["AES-128", "AES-256", "RC4-128"])
    def test_encrypted_with_an_empty_password_is_read(self, tmp_path: Path, algorithm: str) -> None:
        loaded = load_files([self._encrypted(tmp_path, "", algorithm)])
        assert not loaded.skipped and len(loaded.documents) == 2

    def test_a_real_password_is_reported_and_the_rest_loaded(self, tmp_path: Path) -> None:
        locked = self._encrypted(tmp_path, "secret", "AES-256")
        (tmp_path / "notes.txt").write_text("plain notes", encoding="utf-8")
        with pytest.warns(UserWarning, match="encrypted with a password"):
            loaded = load_files([tmp_path])
        assert [s.path for s in loaded.skipped] == [str(locked)]
        assert [d.page_content for d in loaded.documents] == ["plain notes"]

    def test_without_cryptography_the_message_says_what_to_install(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = self._encrypted(tmp_path, "", "AES-256")
        from pypdf import PdfReader
        from pypdf.errors import DependencyError

        def no_crypto(self: Any, password: str) -> Any:
            raise DependencyError("cryptography>=3.1 is required for AES algorithm")

        monkeypatch.setattr(PdfReader, "decrypt", no_crypto)
        with pytest.warns(UserWarning, match="needs the cryptography package: pip install cryptography"):
            loaded = load_files([path])
        assert len(loaded.skipped) == 1


class TestSizeBound:
    def test_a_file_expanding_beyond_the_bound_is_skipped_and_the_rest_kept(self, tmp_path: Path) -> None:
        (tmp_path / "big.md").write_text("word " * 3000, encoding="utf-8")
        (tmp_path / "small.txt").write_text("small file", encoding="utf-8")
        with pytest.warns(UserWarning, match=r"more than 1,000 characters .*raise the limit"):
            loaded = load_files([tmp_path], max_chars=1000)
        assert [Path(s.path).name for s in loaded.skipped] == ["big.md"]
        assert [d.page_content for d in loaded.documents] == ["small file"]

    def test_a_pdf_is_stopped_at_the_page_that_crosses_the_bound(self, tmp_path: Path) -> None:
        pdf = Path(__file__).resolve().parent.parent / "data" / "arden-microgrids-report.pdf"
        with pytest.warns(UserWarning, match="more than 500 characters"):
            assert not load_files([pdf], max_chars=500).documents
        assert load_files([pdf]).documents  # the default bound is far above a real report

    def test_the_bound_reaches_from_files_and_sync(self, tmp_path: Path) -> None:
        (tmp_path / "big.txt").write_text("word " * 300, encoding="utf-8")
        with pytest.warns(UserWarning), pytest.raises(FusionError, match="more than 100 characters"):
            FusionIndex.from_files([tmp_path], HashingEmbeddings(), max_file_chars=100)
        spec = SyncSpec(paths=[tmp_path], chunk_size=200, chunk_overlap=0, max_file_chars=100)
        report = sync_files(FusionIndex(HashingEmbeddings()), spec, {})
        assert [Path(s.path).name for s in report.skipped] == ["big.txt"]

    @pytest.mark.parametrize("bad", [0, -1, True, 2.5, "100"])
    def test_the_bound_is_checked(self, tmp_path: Path, bad: Any) -> None:
        with pytest.raises(InvalidParameterError, match="max_chars"):
            load_files([tmp_path], max_chars=bad)


class TestSaveTarget:
    """The index command checks where it will save before any embedding or chat-model work."""

    def _index(self, out: Path, tmp_path: Path) -> tuple[int, str]:
        import contextlib
        import io

        from langchain_fusion.cli import main

        (tmp_path / "a.txt").write_text("some text", encoding="utf-8")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = main(["index", str(tmp_path / "a.txt"), "--out", str(out), "--embeddings", "openai"])
        return status, err.getvalue()

    def test_under_a_file(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-never-used")  # nothing may be embedded: it would fail
        (tmp_path / "plain").write_text("x", encoding="utf-8")
        status, err = self._index(tmp_path / "plain" / "sub" / "idx", tmp_path)
        assert status == 2
        assert err.strip().endswith(f"{tmp_path / 'plain'} is a file, not a folder") and err.count("\n") == 1

    def test_where_nothing_can_be_written(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        import tempfile

        monkeypatch.setenv("OPENAI_API_KEY", "sk-never-used")
        real = tempfile.TemporaryFile

        def read_only(*args: Any, **kwargs: Any) -> Any:  # root writes anywhere: simulate a read-only mount
            if Path(kwargs.get("dir", "")) == tmp_path / "ro":
                raise OSError(30, "Read-only file system")
            return real(*args, **kwargs)

        (tmp_path / "ro").mkdir()
        monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
        status, err = self._index(tmp_path / "ro" / "idx", tmp_path)
        assert status == 2
        assert f"cannot write in {tmp_path / 'ro'} (Read-only file system)" in err and err.count("\n") == 1
