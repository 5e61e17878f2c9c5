"""output_files.replacing where a rename over the target would do harm: a pipe or device
(a link to /dev/null had its device node replaced by a file), a private file (it became
world-readable), a loop of links (a traceback)."""

import errno
import os
import stat

import numpy as np
import pytest

from turbdb.output_files import replacing


def read_end(pipe):
    """The pipe's read end, opened first (without waiting): the write then never blocks."""
    return os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)


def test_a_pipe_is_written_through_not_replaced(tmp_path):
    pipe = tmp_path / "q.csv"
    os.mkfifo(pipe)
    reader = read_end(pipe)
    try:
        with replacing(pipe) as (out,):
            np.savetxt(out, np.arange(3.0))
        got = os.read(reader, 1 << 16).decode()
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.lstat(pipe).st_mode) and len(got.split()) == 3


def test_a_link_to_a_pipe_is_written_through(tmp_path):
    pipe = tmp_path / "sink"
    os.mkfifo(pipe)
    (tmp_path / "out.csv").symlink_to(pipe)
    reader = read_end(pipe)
    try:
        with replacing(tmp_path / "out.csv") as (out,):
            np.savetxt(out, np.arange(2.0))
        got = os.read(reader, 1 << 16).decode()
    finally:
        os.close(reader)
    assert len(got.split()) == 2 and sorted(os.listdir(tmp_path)) == ["out.csv", "sink"]
    assert stat.S_ISFIFO(os.lstat(pipe).st_mode)


def test_a_private_output_stays_private(tmp_path):
    target = tmp_path / "q.csv"
    target.write_text("old")
    target.chmod(0o600)
    with replacing(target) as (out,):
        out.write_text("new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_loop_of_links_is_the_shells_one_line_error(tmp_path):
    (tmp_path / "a.csv").symlink_to(tmp_path / "b.csv")
    (tmp_path / "b.csv").symlink_to(tmp_path / "a.csv")
    with pytest.raises(OSError) as caught, replacing(tmp_path / "a.csv"):
        pass
    assert caught.value.errno == errno.ELOOP


def test_temporaries_left_by_killed_processes_are_swept_by_the_next_output_beside_them(tmp_path):
    # kill -9 during a write left a hidden temporary, a whole cutout's size, for good.
    import subprocess
    import sys

    from turbdb import output_files

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    machine = output_files._machine()
    left = tmp_path / f".turbdb-tmp-{dead}.{machine}.0badc0de-c.zarr"
    (left / "velocity").mkdir(parents=True)
    (left / "velocity" / "0.0").write_bytes(b"x" * 100)
    running = tmp_path / f".turbdb-tmp-{os.getpid()}.{machine}.00c0ffee-q.csv"  # being written
    running.write_text("1,2,3\n")
    elsewhere = tmp_path / f".turbdb-tmp-{dead}.{'0' * 8 if machine != '0' * 8 else '1' * 8}.0badf00d-q.csv"
    elsewhere.write_text("another machine's, on a shared file system\n")
    old_style = tmp_path / ".turbdb-tmp-0badc0de-q.csv"  # whose writer cannot be told
    old_style.write_text("")
    with replacing(tmp_path / "out.csv") as (out,):
        out.write_text("x\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out.csv", running.name, elsewhere.name,
                                                                 old_style.name])
