"""Crash-safe folders: a kill at any instant of save() leaves a loadable index at the path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from langchain_fusion import FusionError, FusionIndex, IndexFormatError
from langchain_fusion.stores.local import saving
from langchain_fusion.stores.local.manifest import CHECKSUM, manifest_checksum
from langchain_fusion.testing import corpus
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.paths import REPO

SAVER = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {repo!r})
    from langchain_fusion import FusionIndex
    from tests.helpers.embeddings import HashingEmbeddings
    from langchain_fusion.testing import corpus
    for _ in sys.stdin:  # one saver per line: a forked child (no start-up to pay again) saving until killed
        child = os.fork()
        if child == 0:
            index = FusionIndex.from_documents(corpus(1, 300), HashingEmbeddings())
            print("ready", os.getpid(), flush=True)
            step = 0
            while True:  # keep replacing the folder until killed
                index.add_documents(corpus(1000 + step, 3, prefix=f"s{{step}}-"))
                index.save({target!r})
                step += 1
        os.waitpid(child, 0)
        print("gone", flush=True)
    """
)


def _loads(folder: Path) -> int:
    return len(FusionIndex.load(folder, HashingEmbeddings()))


class TestKilledSaves:
    @pytest.mark.subprocess
    @pytest.mark.skipif(not hasattr(os, "fork"), reason="the savers are forked")
    def test_random_kills_never_lose_the_index(self, tmp_path: Path) -> None:
        target = tmp_path / "idx"
        FusionIndex.from_documents(corpus(1, 300), HashingEmbeddings()).save(target)
        script = tmp_path / "saver.py"
        script.write_text(SAVER.format(repo=str(REPO), target=str(target)))
        rng = __import__("random").Random(5)
        process = subprocess.Popen(
            [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO
        )
        assert process.stdin is not None and process.stdout is not None
        saver = None  # the child saving now: killed, not yet reaped
        try:
            for _ in range(6):
                process.stdin.write(b"\n")
                process.stdin.flush()
                ready, pid = process.stdout.readline().split()
                assert ready == b"ready"
                saver = int(pid)
                time.sleep(rng.uniform(0.05, 0.6))
                os.kill(saver, signal.SIGKILL)
                assert process.stdout.readline().strip() == b"gone"
                saver = None
                assert _loads(target) >= 300  # old or new, never nothing
        finally:
            if saver is not None:
                os.kill(saver, signal.SIGKILL)
            process.stdin.close()
            status = process.wait(timeout=60)
            process.stdout.close()
            assert status == 0
        FusionIndex.from_documents(corpus(2, 10), HashingEmbeddings()).save(target)  # cleans leftovers
        assert sorted(p.name for p in tmp_path.iterdir()) == ["idx", "saver.py"]  # a killed saver's lock file too

    def test_a_crash_between_the_renames_is_recovered(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without an atomic exchange, the old folder is set aside first; the next load puts it back."""
        target = tmp_path / "idx"
        FusionIndex.from_documents(corpus(3, 20), HashingEmbeddings()).save(target)
        monkeypatch.setattr(saving, "_exchange", lambda a, b: False)
        real_rename = Path.rename

        def crash_after_setting_aside(self: Path, destination: Path) -> Path:
            moved = real_rename(self, destination)
            if self == target:
                raise SystemExit("simulated crash")  # the process dies with the index set aside
            return moved

        monkeypatch.setattr(Path, "rename", crash_after_setting_aside)
        with pytest.raises(SystemExit):
            FusionIndex.from_documents(corpus(4, 5), HashingEmbeddings()).save(target)
        monkeypatch.setattr(Path, "rename", real_rename)
        assert not target.exists()
        assert _loads(target) == 20  # load recovered the set-aside index
        assert target.is_dir()

    def test_without_an_atomic_exchange_saves_still_replace(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(saving, "_exchange", lambda a, b: False)
        target = tmp_path / "idx"
        FusionIndex.from_documents(corpus(5, 8), HashingEmbeddings()).save(target)
        FusionIndex.from_documents(corpus(6, 9), HashingEmbeddings()).save(target)
        assert _loads(target) == 9
        assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]

    @pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux-only")
    def test_linux_uses_an_atomic_exchange(self, tmp_path: Path) -> None:
        a, b = tmp_path / "a", tmp_path / "b"
        a.mkdir()
        b.mkdir()
        (a / "mark").write_text("a")
        assert saving._exchange(a, b)
        assert (b / "mark").read_text() == "a" and not (a / "mark").exists()

    def test_leftovers_of_crashed_saves_are_removed(self, tmp_path: Path) -> None:
        target = tmp_path / "idx"
        FusionIndex.from_documents(corpus(7, 5), HashingEmbeddings()).save(target)
        for name in (".idx.saving-abc_1234", ".idx.old-def_5678"):
            (tmp_path / name).mkdir()
            (tmp_path / name / "junk").write_bytes(b"x" * 1000)
        (tmp_path / ".other.saving-keep").mkdir()  # another index's staging is not ours
        FusionIndex.from_documents(corpus(8, 5), HashingEmbeddings()).save(target)
        assert sorted(p.name for p in tmp_path.iterdir()) == [".other.saving-keep", "idx"]


class TestDurability:
    """Before the swap, a save fsyncs every file and folder of the new index; after it, the folder holding it."""

    def test_every_file_and_folder_is_synced_before_the_swap(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        target = tmp_path / "idx"
        FusionIndex.from_documents(corpus(9, 20), HashingEmbeddings()).save(target)
        synced: list[tuple[tuple[int, int], bool]] = []  # (file, whether the target held the previous index then)
        previous = (target / "manifest.json").stat().st_ino

        def fsync(fd: int) -> None:  # the suite skips the real call (conftest.no_fsync): record it instead
            status = os.fstat(fd)
            synced.append(((status.st_dev, status.st_ino), (target / "manifest.json").stat().st_ino == previous))

        monkeypatch.setattr(os, "fsync", fsync)
        FusionIndex.from_documents(corpus(10, 30), HashingEmbeddings()).save(target)
        saved = [target, *target.rglob("*")]
        before_swap = {inode for inode, old in synced if old}
        for path in saved:
            status = path.stat()
            assert (status.st_dev, status.st_ino) in before_swap, path
        folder_of = tmp_path.stat()
        assert synced[-1] == ((folder_of.st_dev, folder_of.st_ino), False)  # the swap itself, once it happened
        assert _loads(target) == 30


class TestConcurrentSavers:
    def test_two_savers_do_not_interleave(self, tmp_path: Path) -> None:
        target = tmp_path / "idx"
        indexes = [FusionIndex.from_documents(corpus(10 + i, 50 + i), HashingEmbeddings()) for i in range(2)]
        errors: list[BaseException] = []

        def save(index: FusionIndex) -> None:
            try:
                for _ in range(5):
                    index.save(target)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=save, args=(index,)) for index in indexes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        assert _loads(target) in (50, 51)

    def test_the_lock_is_held_across_processes(self, tmp_path: Path) -> None:
        import fcntl

        target = tmp_path / "idx"
        with saving.save_lock(target.absolute()):
            fd = os.open(tmp_path / ".idx.lock", os.O_RDWR)
            try:
                with pytest.raises(BlockingIOError):
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)


class TestLockFiles:
    """The locks leave nothing beside the index when done: a checkout that holds one stays clean."""

    def test_save_load_and_update_leave_only_the_folder(self, tmp_path: Path) -> None:
        target = tmp_path / "idx"
        FusionIndex.from_documents(corpus(3, 5), HashingEmbeddings()).save(target)
        _loads(target)
        with saving.update_lock(target.absolute()):
            pass
        with saving.load_lock(target.absolute()), saving.load_lock(target.absolute()):  # two readers at once
            pass
        assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]

    @pytest.mark.parametrize("lock", ["save_lock", "update_lock"])
    def test_removed_lock_files_still_exclude(self, tmp_path: Path, lock: str) -> None:
        # Each holder removes the file when done; one that waited on a removed file takes the lock again.
        target, counter = (tmp_path / "idx").absolute(), tmp_path / "counter"
        counter.write_text("0")
        take = getattr(saving, lock)
        inside: list[int] = []
        errors: list[BaseException] = []

        def bump() -> None:
            try:
                for _ in range(40):
                    with take(target):
                        inside.append(1)
                        if len(inside) != 1:
                            errors.append(AssertionError("two holders at once"))
                        value = int(counter.read_text())
                        time.sleep(0)
                        counter.write_text(str(value + 1))
                        inside.pop()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=bump) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        assert counter.read_text() == "160"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["counter"]


class TestSaveErrors:
    def test_os_errors_become_fusion_errors(self, tmp_path: Path) -> None:
        blocker = tmp_path / "file"
        blocker.write_text("not a folder")
        index = FusionIndex.from_documents(corpus(9, 3), HashingEmbeddings())
        with pytest.raises(FusionError, match="cannot save the index"):
            index.save(blocker / "idx")

    @pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root ignores permissions")
    def test_read_only_parent(self, tmp_path: Path) -> None:
        parent = tmp_path / "ro"
        parent.mkdir()
        parent.chmod(0o500)
        try:
            with pytest.raises(FusionError, match="cannot save the index"):
                FusionIndex.from_documents(corpus(9, 3), HashingEmbeddings()).save(parent / "idx")
        finally:
            parent.chmod(0o700)


class TestLoadsDuringSaves:
    def test_a_load_never_mixes_two_saves(self, tmp_path: Path) -> None:
        """A load holds a shared lock, so a save to the same path waits instead of swapping files under it."""
        import numpy as np
        from langchain_core.documents import Document

        target = tmp_path / "idx"
        embeddings = HashingEmbeddings()
        index = FusionIndex.from_documents(corpus(1, 200), embeddings)
        texts = ["w1 w2 w3", "w4 w5 w6"]  # same lengths: only the content tells the two saves apart
        index.upsert_documents([Document(id="d1-0", page_content=texts[0])])
        index.save(target)
        stop = threading.Event()
        errors: list[BaseException] = []

        def saver() -> None:
            step = 0
            try:
                while not stop.is_set():
                    step += 1
                    index.upsert_documents([Document(id="d1-0", page_content=texts[step % 2])])
                    index.save(target)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=saver)
        thread.start()
        try:
            for _ in range(60):
                loaded = FusionIndex.load(target, embeddings)
                doc = loaded.get_by_ids(["d1-0"])[0]
                view = loaded.view()
                stored = view.vectors(view.keys_of(["d1-0"]))[0]
                expected = np.asarray(embeddings.embed_query(doc.page_content), dtype=np.float32)
                np.testing.assert_allclose(stored, expected, atol=1e-5)
        finally:
            stop.set()
            thread.join()
        assert not errors


class TestHostileFolders:
    def test_a_file_left_out_of_the_manifest_is_refused(self, tmp_path: Path) -> None:
        import json

        folder = FusionIndex.from_documents(corpus(2, 5), HashingEmbeddings()).save(tmp_path / "idx")
        manifest = json.loads((folder / "manifest.json").read_text())
        del manifest["files"]["documents/ids.json"]
        manifest[CHECKSUM] = manifest_checksum(manifest)  # crafted: past the manifest's own checksum
        (folder / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(IndexFormatError, match=r"does not list \['documents/ids.json'\]"):
            FusionIndex.load(folder, HashingEmbeddings())

    def test_a_symbolic_link_is_refused(self, tmp_path: Path) -> None:
        folder = FusionIndex.from_documents(corpus(3, 5), HashingEmbeddings()).save(tmp_path / "idx")
        outside = tmp_path / "outside.npy"
        (folder / "vectors.npy").rename(outside)
        (folder / "vectors.npy").symlink_to(outside)
        with pytest.raises(IndexFormatError, match="symbolic link"):
            FusionIndex.load(folder, HashingEmbeddings())

    def test_documents_that_are_not_utf8(self, tmp_path: Path) -> None:
        import hashlib
        import json

        folder = FusionIndex.from_documents(corpus(4, 5), HashingEmbeddings()).save(tmp_path / "idx")
        data = b"\xff\xfe" + (folder / "documents" / "texts.txt").read_bytes()[2:]
        (folder / "documents" / "texts.txt").write_bytes(data)
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["files"]["documents/texts.txt"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        manifest[CHECKSUM] = manifest_checksum(manifest)  # crafted: past the manifest's own checksum
        (folder / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(IndexFormatError, match="is not valid UTF-8"):
            FusionIndex.load(folder, HashingEmbeddings())

    def test_cleanup_spares_a_sibling_whose_name_extends_ours(self, tmp_path: Path) -> None:
        """``idx.old-1`` is another index: its crashed save's copy is not a leftover of ``idx``."""
        sibling_copy = tmp_path / ".idx.old-1.old-abcd1234"
        FusionIndex.from_documents(corpus(5, 4), HashingEmbeddings()).save(sibling_copy)
        FusionIndex.from_documents(corpus(6, 4), HashingEmbeddings()).save(tmp_path / "idx")
        assert sibling_copy.is_dir()
        assert _loads(tmp_path / "idx.old-1") == 4  # recovered for its own name only
        assert _loads(tmp_path / "idx") == 4


SERVER = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {repo!r})
    from langchain_fusion import FusionIndex, IndexFormatError
    from tests.helpers.embeddings import HashingEmbeddings
    if {map_everything!r}:
        from langchain_fusion.stores.local import mapped
        mapped.MAP_MIN_BYTES = 0
    retriever = FusionIndex.load({folder!r}, HashingEmbeddings()).as_retriever(k=5)
    for line in sys.stdin:  # one query per line, one JSON answer per line
        try:
            answer = [d.page_content for d in retriever.invoke(line.strip())]
        except IndexFormatError as exc:
            answer = "error: " + str(exc)
        print(json.dumps(answer), flush=True)
    """
)
QUERY = "w39 w3 w22 w16"


@pytest.mark.subprocess
class TestOverwritesInPlace:
    """A serving process survives its folder's files rewritten in place (``cp`` over it, ``rsync --inplace``).

    Small files are read into memory at load, so the old answers go on; files large enough to be
    mapped (all of them with ``map_everything``) are checked before each query, and a changed one
    is one clear error, never SIGBUS or silently changed texts.
    """

    @staticmethod
    def _serve(tmp_path: Path, folder: Path, map_everything: bool) -> subprocess.Popen[str]:
        script = tmp_path / "server.py"
        script.write_text(SERVER.format(repo=str(REPO), folder=str(folder), map_everything=map_everything))
        return subprocess.Popen(
            [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
        )

    @staticmethod
    def _ask(process: subprocess.Popen[str], query: str) -> object:
        import json

        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(query + "\n")
        process.stdin.flush()
        line = process.stdout.readline()
        return json.loads(line) if line else None

    def _check(self, process: subprocess.Popen[str], before: object, after: object, map_everything: bool) -> None:
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(timeout=60) == 0  # not killed by a signal (SIGBUS: -7)
        if map_everything:
            assert isinstance(after, str) and after.startswith("error: ") and "\n" not in after
            assert "changed on disk since it was loaded" in after and "load the index again" in after
        else:
            assert after == before

    @pytest.mark.parametrize("map_everything", [False, True])
    def test_a_smaller_index_copied_over_the_files(self, tmp_path: Path, map_everything: bool) -> None:
        import shutil

        folder = FusionIndex.from_documents(corpus(1, 60), HashingEmbeddings()).save(tmp_path / "idx")
        other = FusionIndex.from_documents(corpus(2, 5), HashingEmbeddings()).save(tmp_path / "other")
        with self._serve(tmp_path, folder, map_everything) as process:  # leaving it closes the pipes and waits
            before = self._ask(process, QUERY)
            assert isinstance(before, list) and len(before) == 5
            inode = (folder / "vectors.npy").stat().st_ino
            for path in sorted(p for p in other.rglob("*") if p.is_file()):
                shutil.copyfile(path, folder / path.relative_to(other))  # as `cp -r other/* idx/`: truncates, rewrites
            assert (folder / "vectors.npy").stat().st_ino == inode  # the same file, now shorter
            self._check(process, before, self._ask(process, QUERY), map_everything)

    @pytest.mark.parametrize("map_everything", [False, True])
    def test_texts_rewritten_to_the_same_size(self, tmp_path: Path, map_everything: bool) -> None:
        folder = FusionIndex.from_documents(corpus(1, 60), HashingEmbeddings()).save(tmp_path / "idx")
        with self._serve(tmp_path, folder, map_everything) as process:  # leaving it closes the pipes and waits
            before = self._ask(process, QUERY)
            path = folder / "documents" / "texts.txt"
            with path.open("r+b") as handle:  # as `rsync --inplace`: same file, same size, other bytes
                data = handle.read()
                handle.seek(0)
                handle.write(data.upper())
            self._check(process, before, self._ask(process, QUERY), map_everything)


class TestMappedFilesAndSaves:
    """Saving over a loaded index replaces the folder, not its files: the loaded index keeps answering."""

    def test_a_save_over_a_loaded_and_mapped_index(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from langchain_fusion.stores.local import mapped

        monkeypatch.setattr(mapped, "MAP_MIN_BYTES", 0)
        folder = FusionIndex.from_documents(corpus(1, 60), HashingEmbeddings()).save(tmp_path / "idx")
        loaded = FusionIndex.load(folder, HashingEmbeddings())
        before = [d.page_content for d in loaded.as_retriever(k=5).invoke(QUERY)]
        FusionIndex.from_documents(corpus(2, 5), HashingEmbeddings()).save(folder)
        loaded.add_documents(corpus(3, 2, prefix="new"))
        assert [d.page_content for d in loaded.as_retriever(k=5).invoke(QUERY)][:1] == before[:1]
        loaded.save(folder)  # reads its mapped rows to write them
        assert len(FusionIndex.load(folder, HashingEmbeddings())) == 62
