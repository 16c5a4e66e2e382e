"""The folder a local cluster lives in, and the state file in it, trusted only when nobody else
can change them.

DIR holds the cluster's keys and the state file from which ``down`` learns which processes to
signal, so whoever can write DIR, or replace it through a folder above it, can read those keys,
plant links where ``up`` writes, or make ``down`` signal processes of their choosing. The rule is
OpenSSH's for its own files (StrictModes, misc.c ``safe_path``): DIR must belong to the caller
and be writable by nobody else; every folder above it must belong to the caller or root and, if
others may write to it, carry the sticky bit (as /tmp does), so that nobody else can rename or
remove what is in it. A DIR that does not exist is created, readable by the caller alone.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
from pathlib import Path

from trainyard.contract.errors import UserError

STICKY = stat.S_ISVTX
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class UnsafeFolder(UserError):
    pass


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _describe(path: Path, st: os.stat_result) -> str:
    return f"{path} (owner {_owner(st.st_uid)}, mode {stat.filemode(st.st_mode)} {stat.S_IMODE(st.st_mode):04o})"


def _check_above(real: Path, include_self: bool = False) -> None:
    """The rule for the folders above DIR (module docstring), from ``real``'s parent (or
    ``real`` itself) up to /."""
    for parent in [real, *real.parents] if include_self else real.parents:
        pst = os.stat(parent)
        if pst.st_uid not in (os.geteuid(), 0):
            raise UnsafeFolder(
                f"{_describe(parent, pst)}, a folder above the cluster's, belongs to another user, who could "
                "replace the cluster's folder with one of theirs; put it under a folder of your own"
            )
        if pst.st_mode & OTHERS_WRITE and not pst.st_mode & STICKY:
            raise UnsafeFolder(
                f"{_describe(parent, pst)}, a folder above the cluster's, is writable by others without the "
                f"sticky bit, so anyone could rename the cluster's folder away and put their own in its place; "
                f"run chmod +t {parent} (as /tmp has it) or chmod go-w {parent}, or put the cluster's folder elsewhere"
            )


def check_folder(folder: Path) -> Path:
    """``folder`` resolved, once it and every folder above it pass the rule of the module
    docstring; UnsafeFolder naming the path, its owner and mode, and the fix, otherwise."""
    me = os.geteuid()
    real = folder.resolve(strict=True)
    st = os.stat(real)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeFolder(f"{real}: not a folder; give trainyard cluster a folder of its own")
    if st.st_uid != me:
        raise UnsafeFolder(
            f"{_describe(real, st)} belongs to another user, who could read the cluster's keys and forge the "
            f"state that `down` trusts; use a folder of your own (mkdir -m 700 ~/trainyard-dev), not this one"
        )
    if st.st_mode & OTHERS_WRITE:
        raise UnsafeFolder(
            f"{_describe(real, st)} is writable by others, who could plant files and links in it; "
            f"run chmod go-w {real} (or use a new folder: up creates it readable by you alone)"
        )
    _check_above(real)
    return real


def secure_folder(folder: Path) -> Path:
    """:func:`check_folder`, creating ``folder`` (and any missing folder above it) first, each
    readable by the caller alone."""
    folder = Path(os.path.abspath(folder))
    missing = []
    p = folder
    while not os.path.lexists(p):
        missing.append(p)
        p = p.parent
    if missing:  # nothing is made under a folder that fails the rule
        _check_above(p.resolve(strict=True), include_self=True)
    for m in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile: judged below like any other
            os.mkdir(m, 0o700)
    return check_folder(folder)


def check_private_file(path: Path) -> os.stat_result:
    """The stat of ``path`` (not following a link), if it is a regular file of the caller that
    nobody else may write; UnsafeFolder otherwise (FileNotFoundError passes through)."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeFolder(f"{path}: not a regular file (a link or something else); refusing to trust it")
    if st.st_uid != os.geteuid():
        raise UnsafeFolder(
            f"{_describe(path, st)} belongs to another user; refusing to trust it (it names the processes `down` "
            "signals). Remove it if you know where it came from"
        )
    if st.st_mode & OTHERS_WRITE:
        raise UnsafeFolder(
            f"{_describe(path, st)} is writable by others; refusing to trust it (it names the processes `down` "
            f"signals). Check who changed it, then chmod go-w {path}"
        )
    return st
