"""Files that appear under their name only when complete."""
import os
import stat

import pytest

from elmo_plugin.common.atomic_file import atomic_output_path, write_text_atomically


def test_the_file_appears_complete_with_the_usual_permissions(tmp_path):
    target = tmp_path / "out.txt"
    with atomic_output_path(str(target)) as temporary:
        assert temporary != str(target) and os.path.dirname(temporary) == str(tmp_path)
        with open(temporary, "w") as handle:
            handle.write("done")
        assert not target.exists()
    assert target.read_text() == "done"
    assert os.listdir(tmp_path) == ["out.txt"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o666 & ~umask


@pytest.mark.parametrize("interruption", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_an_interruption_leaves_the_old_file_and_no_temporary(tmp_path, interruption):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(type(interruption)):
        with atomic_output_path(str(target)) as temporary:
            with open(temporary, "w") as handle:
                handle.write("half")
            raise interruption
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_write_text_atomically_writes_utf8(tmp_path):
    target = tmp_path / "words.txt"
    write_text_atomically(str(target), "über 東京\n")
    assert target.read_bytes() == "über 東京\n".encode("utf-8")


def test_the_data_and_the_rename_are_flushed_to_the_disk(tmp_path, monkeypatch):
    flushed = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda descriptor: flushed.append(os.readlink(f"/proc/self/fd/{descriptor}"))
                        or real_fsync(descriptor))
    target = tmp_path / "out.txt"
    with atomic_output_path(str(target)) as temporary:
        with open(temporary, "w") as handle:
            handle.write("done")
        assert flushed == []
    # The temporary file before the rename, then the directory that records the rename.
    assert flushed == [temporary, str(tmp_path)]
