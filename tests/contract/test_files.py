"""Bounded reads of configuration files and private writes (trainyard/contract/files.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trainyard.contract import files
from trainyard.contract.files import MAX_CONFIG_BYTES, FileTooLarge, read_bounded, read_text_bounded, write_private


@pytest.fixture
def bytes_read(monkeypatch) -> list[int]:
    """Every os.read's length, to show what was (not) read."""
    seen: list[int] = []
    real = os.read

    def counting(fd: int, n: int) -> bytes:
        got = real(fd, n)
        seen.append(len(got))
        return got

    monkeypatch.setattr(os, "read", counting)
    return seen


def test_a_sparse_50_mb_file_is_refused_from_its_size_without_a_byte_read(tmp_path: Path, bytes_read):
    big = tmp_path / "ca.crt"
    with open(big, "wb") as f:
        f.truncate(50 * 1024 * 1024)  # sparse: costs no disk
    with pytest.raises(FileTooLarge) as refused:
        read_bounded(big, what="the client CA bundle")
    message = str(refused.value)
    assert str(big) in message and "52428800 bytes" in message and f"{MAX_CONFIG_BYTES} bytes" in message
    assert "the client CA bundle" in message
    assert sum(bytes_read) == 0
    assert refused.value.size == 50 * 1024 * 1024 and refused.value.limit == MAX_CONFIG_BYTES


def test_a_benign_file_and_one_of_exactly_the_bound_load(tmp_path: Path):
    small = tmp_path / "profile.yaml"
    small.write_text("kind: FabricProfile\n")
    assert read_text_bounded(small) == "kind: FabricProfile\n"
    exact = tmp_path / "exact"
    exact.write_bytes(b"x" * 100)
    assert read_bounded(exact, limit=100) == b"x" * 100
    exact.write_bytes(b"x" * 101)
    with pytest.raises(FileTooLarge, match=r"exact: the file is 101 bytes, over the bound of 100 bytes"):
        read_bounded(exact, limit=100)


def test_a_file_that_grows_while_it_is_read_is_cut_off_one_byte_past_the_bound(tmp_path: Path, monkeypatch, bytes_read):
    grown = tmp_path / "tls.crt"
    grown.write_bytes(b"y" * 10_000)
    real = os.fstat

    def small_at_first(fd: int) -> os.stat_result:  # the size seen before a writer appended
        st = list(real(fd))
        st[stat.ST_SIZE] = 10
        return os.stat_result(st)

    monkeypatch.setattr(files.os, "fstat", small_at_first)
    with pytest.raises(FileTooLarge, match=r"tls\.crt: the file is more than 100 bytes, over the bound of 100"):
        read_bounded(grown, limit=100)
    assert sum(bytes_read) == 101


def test_a_pipe_without_a_writer_and_a_folder_are_refused_at_once(tmp_path: Path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        read_bounded(fifo)  # opened without waiting for a writer, refused without a read
    with pytest.raises(OSError, match="not a regular file"):
        read_bounded(tmp_path)


def test_write_private_gives_the_mode_whatever_the_umask_and_leaves_no_temporary_file(tmp_path: Path):
    key = tmp_path / "ca.key"
    old = os.umask(0)
    try:
        write_private(key, b"secret")
    finally:
        os.umask(old)
    assert key.read_bytes() == b"secret"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    write_private(key, b"renewed", mode=0o644)
    assert key.read_bytes() == b"renewed" and stat.S_IMODE(key.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["ca.key"]


def test_write_private_never_writes_through_a_planted_link(tmp_path: Path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched")
    key = tmp_path / "tls.key"
    # at the target itself and at the temporary name the old writer used (.NAME.tmp)
    key.symlink_to(victim)
    (tmp_path / ".tls.key.tmp").symlink_to(victim)
    write_private(key, b"key")
    assert victim.read_bytes() == b"untouched"
    assert not key.is_symlink() and key.read_bytes() == b"key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_write_private_refuses_a_temporary_name_that_exists_and_cleans_up(tmp_path: Path, monkeypatch):
    """Exclusive creation: a name someone made first (here: forced) is an error, not a file to reuse."""
    monkeypatch.setattr(files.secrets, "token_hex", lambda _n: "fixed")
    (tmp_path / ".k.fixed.tmp").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError):
        write_private(tmp_path / "k", b"key")
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "k").exists()
