"""What ``trainyard cluster up``/``down`` trust: a DIR nobody else can change, a state file of the
caller's, processes that are still the ones ``up`` started; and the keys they write.

No control plane runs here (the refusals come before anything starts); the state file names a
``sleep`` that stands in for a cluster's process.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from pathlib import Path

import pytest

from trainyard.cluster import controlplane, pki
from trainyard.cluster.controlplane import STATE, State
from trainyard.cluster.folder import UnsafeFolder, check_folder, secure_folder
from trainyard.cluster.processes import Daemon, is_ours, spawn, start_time
from trainyard.contract.errors import UserError

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


def nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# --- DIR and the folders above it --------------------------------------------------------------


def test_a_missing_dir_is_created_readable_by_the_caller_alone(tmp_path: Path):
    folder = secure_folder(tmp_path / "a" / "dev")
    assert folder == (tmp_path / "a" / "dev").resolve()
    assert mode(folder) == 0o700 and mode(folder.parent) == 0o700
    assert secure_folder(folder) == folder  # and accepted as it is next time


@pytest.mark.parametrize("bits", [0o777, 0o770, 0o702])
def test_a_dir_others_may_write_is_refused_naming_owner_mode_and_fix(tmp_path: Path, bits: int):
    folder = tmp_path / "dev"
    folder.mkdir()
    folder.chmod(bits)
    with pytest.raises(UnsafeFolder) as refused:
        secure_folder(folder)
    message = str(refused.value)
    assert f"{folder} (owner " in message and f"{bits:04o})" in message
    assert "writable by others" in message and f"chmod go-w {folder}" in message


def test_a_world_writable_dir_with_the_sticky_bit_is_still_refused_as_dir(tmp_path: Path):
    """The sticky bit makes a folder safe to be *above* DIR (as /tmp), not to be DIR."""
    folder = tmp_path / "dev"
    folder.mkdir()
    folder.chmod(0o1777)
    with pytest.raises(UnsafeFolder, match="writable by others"):
        secure_folder(folder)


@needs_root
def test_a_dir_of_another_user_is_refused(tmp_path: Path):
    folder = tmp_path / "dev"
    folder.mkdir(mode=0o700)
    os.chown(folder, nobody(), -1)
    with pytest.raises(UnsafeFolder, match=rf"{folder} \(owner nobody \(uid {nobody()}\).*belongs to another user"):
        secure_folder(folder)


@needs_root
def test_a_folder_above_of_another_user_is_refused(tmp_path: Path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    (theirs / "dev").mkdir(mode=0o700)
    os.chown(theirs, nobody(), -1)
    with pytest.raises(UnsafeFolder, match=rf"{theirs} \(owner nobody.*a folder above.*belongs to another user"):
        secure_folder(theirs / "dev")


def test_a_folder_above_others_may_write_without_the_sticky_bit_is_refused(tmp_path: Path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeFolder, match=rf"{shared} .*0777\), a folder above .*without the sticky bit.*chmod \+t"):
        secure_folder(shared / "dev")
    assert not (shared / "dev").exists()  # nothing made under it
    (shared / "dev").mkdir(mode=0o700)
    with pytest.raises(UnsafeFolder, match=rf"{shared} .*0777\), a folder above"):
        secure_folder(shared / "dev")


def test_a_folder_above_with_the_sticky_bit_like_tmp_is_fine(tmp_path: Path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # /tmp's mode, owned by the caller (or root)
    folder = secure_folder(shared / "dev")
    assert mode(folder) == 0o700


def test_a_link_is_judged_by_where_it_leads(tmp_path: Path):
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    (tmp_path / "dev").symlink_to(open_folder)
    with pytest.raises(UnsafeFolder, match=f"{open_folder} .*writable by others"):
        check_folder(tmp_path / "dev")


def test_up_and_down_refuse_an_unsafe_dir_before_doing_anything(tmp_path: Path):
    folder = tmp_path / "dev"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(UnsafeFolder):
        controlplane.start(folder, "t", "1.36", progress=lambda _: None)
    with pytest.raises(UnsafeFolder):
        controlplane.down(folder)
    assert list(folder.iterdir()) == []


# --- the state file and the processes it names ---------------------------------------------------


@pytest.fixture
def recorded(tmp_path: Path):
    """A DIR whose state file names a running ``sleep`` started as ``up`` starts its processes."""
    folder = secure_folder(tmp_path / "dev")
    daemon = spawn("etcd", ["sleep", "300"], folder / "logs" / "etcd.log")
    State(cluster="t", kubernetes="1.36", server="https://127.0.0.1:1", daemons=[daemon]).save(folder)
    yield folder, daemon
    if start_time(daemon.pid) is not None:
        os.killpg(daemon.pid, 9)
        os.waitpid(daemon.pid, 0)


def test_the_state_file_is_written_readable_by_the_caller_alone(recorded):
    folder, _ = recorded
    assert mode(folder / STATE) == 0o600
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []  # no temporary file left


@needs_root
def test_down_refuses_a_state_file_of_another_user_and_signals_nothing(recorded):
    folder, daemon = recorded
    os.chown(folder / STATE, nobody(), -1)
    with pytest.raises(UnsafeFolder, match=rf"{folder / STATE} \(owner nobody.*belongs to another user"):
        controlplane.down(folder)
    assert daemon.alive()
    os.chown(folder / STATE, os.geteuid(), -1)  # the positive control: the caller's own state
    assert controlplane.down(folder) == [f"etcd (pid {daemon.pid})"]
    assert not daemon.alive()


def test_down_refuses_a_state_file_others_may_write(recorded):
    folder, daemon = recorded
    (folder / STATE).chmod(0o622)
    with pytest.raises(UnsafeFolder, match=rf"{folder / STATE} .*0622\) is writable by others"):
        controlplane.down(folder)
    assert daemon.alive()


def test_down_refuses_a_state_file_that_is_a_link(recorded, tmp_path: Path):
    folder, daemon = recorded
    elsewhere = tmp_path / "elsewhere.json"
    (folder / STATE).rename(elsewhere)
    (folder / STATE).symlink_to(elsewhere)
    with pytest.raises(UnsafeFolder, match="not a regular file"):
        controlplane.down(folder)
    assert daemon.alive()


def test_an_oversized_state_file_is_refused_unread(recorded):
    folder, daemon = recorded
    with open(folder / STATE, "r+b") as f:
        f.truncate(50 * 1024 * 1024)
    with pytest.raises(UserError, match=r"cluster\.json: the state file is 52428800 bytes, over the bound"):
        controlplane.down(folder)
    assert daemon.alive()


def test_down_signals_only_a_process_that_is_still_the_one_up_started(recorded):
    """A pid with the right start time that is not the leader of its own group (a process ``up``
    did not start) is not signalled, nor is a pid whose start time differs (reused)."""
    folder, daemon = recorded
    stranger = subprocess.Popen(["sleep", "300"])  # in this test's process group, not a group of its own
    try:
        started = start_time(stranger.pid)
        assert started is not None and not is_ours(stranger.pid, started)
        reused = Daemon(name="kube-apiserver", pid=daemon.pid, started=daemon.started + 1, log=daemon.log)
        impostor = Daemon(name="kube-scheduler", pid=stranger.pid, started=started, log=daemon.log)
        State(cluster="t", kubernetes="1.36", server="x", daemons=[reused, impostor]).save(folder)
        assert controlplane.down(folder) == []
        assert stranger.poll() is None and daemon.alive()
    finally:
        stranger.kill()
        stranger.wait()


# --- the keys ------------------------------------------------------------------------------------


def test_the_pki_writes_keys_for_the_owner_alone_and_never_through_a_link(tmp_path: Path):
    folder = tmp_path / "pki"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (folder / "ca.crt").symlink_to(victim)
    (folder / ".sa.key.tmp").symlink_to(victim)  # where a predictable temporary name would be
    old = os.umask(0)
    try:
        p = pki.create(folder)
    finally:
        os.umask(old)
    assert victim.read_text() == "untouched" and not p.ca.is_symlink()
    keys = sorted(folder.glob("*.key"))
    assert {k.name for k in keys} >= {"sa.key", "apiserver.key", "admin.key", "etcd-server.key"}
    assert all(mode(k) == 0o600 for k in keys), {k.name: oct(mode(k)) for k in keys}
    assert not [f for f in folder.iterdir() if f.name.endswith(".tmp") and not f.is_symlink()]


def test_etcd_has_a_ca_of_its_own(tmp_path: Path):
    """Only kube-apiserver's etcd client certificate chains to etcd's CA: the admin's (and every
    other client of the cluster's CA) cannot talk to etcd directly."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    p = pki.create(tmp_path / "pki")

    def load(path: Path) -> x509.Certificate:
        return x509.load_pem_x509_certificate(path.read_bytes())

    etcd_ca, cluster_ca = load(p.etcd_ca), load(p.ca)
    load(p.cert(pki.ETCD_CLIENT)).verify_directly_issued_by(etcd_ca)
    load(p.cert(pki.ETCD_SERVER)).verify_directly_issued_by(etcd_ca)
    for identity in pki.CLIENTS:
        with pytest.raises((ValueError, InvalidSignature)):
            load(p.cert(identity)).verify_directly_issued_by(etcd_ca)
        load(p.cert(identity)).verify_directly_issued_by(cluster_ca)
