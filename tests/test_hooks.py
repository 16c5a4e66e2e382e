"""The commit-msg hook (.githooks/commit-msg): a subject over 72 characters is refused.

The hook is run as git runs it, with the message file as its argument, and once through a real
``git commit`` in a repository (and a worktree of it) where ``make hooks`` installed it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / ".githooks" / "commit-msg"
LIMIT = 72

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def isolated_env(home: Path) -> dict[str, str]:
    """git with no user or system configuration: the machine's settings cannot change a verdict."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return {**env, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip


def hook(tmp_path: Path, message: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_bytes(message.encode())
    where = cwd or tmp_path
    return subprocess.run([str(HOOK), str(path)], cwd=where, env=isolated_env(tmp_path), capture_output=True,
                          text=True, timeout=30)  # fmt: skip


def test_the_hook_is_executable_posix_sh():
    assert os.access(HOOK, os.X_OK)
    assert HOOK.read_text().startswith("#!/bin/sh\n")


def test_72_characters_pass_and_73_are_refused_naming_length_and_limit(tmp_path):
    assert hook(tmp_path, "a" * 72 + "\n").returncode == 0
    refused = hook(tmp_path, "a" * 73 + "\n\nthe body may be as long as it likes " + "b" * 200 + "\n")
    assert refused.returncode == 1
    assert "the subject is 73 characters; at most 72" in refused.stderr
    assert "a" * 73 in refused.stderr  # the subject is shown
    assert "COMMIT_EDITMSG" in refused.stderr  # and where the message is kept


@pytest.mark.parametrize("char", ["é", "—", "日", "🚂"])  # 2, 3, 3 and 4 bytes in UTF-8
def test_characters_are_counted_not_bytes(tmp_path, char):
    assert hook(tmp_path, char * LIMIT + "\n").returncode == 0
    refused = hook(tmp_path, char * (LIMIT + 1) + "\n")
    assert refused.returncode == 1 and "73 characters" in refused.stderr


def test_comment_lines_and_the_verbose_diff_are_not_the_subject(tmp_path):
    message = (
        "# Please enter the commit message for your changes. " + "#" * 80 + "\n"
        "\n"
        "short subject   \n"  # trailing blanks: git's cleanup cuts them
        "\n"
        "# " + "x" * 100 + "\n"
        "# ------------------------ >8 ------------------------\n"
        "diff --git a/f b/f\n" + "+" + "y" * 100 + "\n"
    )
    assert hook(tmp_path, message).returncode == 0
    assert hook(tmp_path, "# " + "x" * 100 + "\n" + "z" * 73 + "\n").returncode == 1


def test_the_comment_character_is_git_s(tmp_path):
    """With core.commentChar=';' a ';' line is a comment and a '#' line is text, as git reads them."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], env=isolated_env(tmp_path), check=True, timeout=30)
    subprocess.run(["git", "config", "core.commentChar", ";"], cwd=tmp_path, env=isolated_env(tmp_path), check=True,
                   timeout=30)  # fmt: skip
    assert hook(tmp_path, "; " + "x" * 100 + "\nfine\n").returncode == 0
    assert hook(tmp_path, "# " + "x" * 100 + "\nfine\n").returncode == 1


def test_the_subject_is_the_first_paragraph_as_git_log_shows_it(tmp_path):
    """git log's %s joins the lines of the first paragraph: two lines of 40 are one subject of 81."""
    refused = hook(tmp_path, "a" * 40 + "\n" + "b" * 40 + "\n\nbody\n")
    assert refused.returncode == 1 and "81 characters" in refused.stderr
    assert hook(tmp_path, "a" * 35 + "\n" + "b" * 36 + "\n").returncode == 0


@pytest.mark.parametrize("message", ["", "\n\n", "# only comments\n#\n", "   \n\t\n"])
def test_an_empty_message_is_left_to_git(tmp_path, message):
    """git aborts an empty commit itself (and says so); the hook must not stand in its way."""
    assert hook(tmp_path, message).returncode == 0


@pytest.mark.parametrize(
    ("message", "verdict"),
    [
        ("fixup! " + "a" * LIMIT, 0),  # the prefix goes with rebase --autosquash
        ("fixup! " + "a" * (LIMIT + 1), 1),
        ("squash! fixup! " + "a" * LIMIT, 0),
        ("amend! " + "a" * (LIMIT + 1), 1),
        ('Revert "' + "a" * LIMIT + '"', 0),  # git wrapped an existing subject
        ('Revert "' + "a" * (LIMIT + 1) + '"', 1),
        ('Reapply "' + "a" * LIMIT + '"', 0),
        ("Merge branch '" + "feature/" + "a" * 80 + "' into main", 0),  # git's own subject for a merge
        ("Merge remote-tracking branch 'origin/" + "a" * 80 + "'", 0),
        ("Merge " + "a" * LIMIT, 1),  # a subject that only starts with Merge is checked
        ("Revert " + "a" * LIMIT, 1),
    ],
)
def test_what_git_writes_around_a_subject(tmp_path, message, verdict):
    assert hook(tmp_path, message + "\n").returncode == verdict


# Text git keeps on a line: printable characters, no line break, not starting with '#'.
subjects = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=100).filter(
    lambda s: s.strip() and not s.startswith(("#", "Merge ", "Revert ", "Reapply ", "fixup! ", "squash! ", "amend! "))
)


@settings(max_examples=60, deadline=None)
@given(subjects)
def test_the_verdict_is_the_length_in_characters(tmp_path_factory, subject):
    tmp_path = tmp_path_factory.mktemp("msg")
    kept = subject.rstrip(" ")  # git's cleanup cuts trailing blanks (the other blanks are Cc, left out)
    done = hook(tmp_path, subject + "\n")
    assert done.returncode == (1 if len(kept) > LIMIT else 0), (len(kept), done.stderr)


def git(where: Path, *args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=where, env=env, capture_output=True, text=True, check=check, timeout=60)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_hooks_makes_git_refuse_a_long_subject_in_a_clone_and_its_worktree(tmp_path):
    env = isolated_env(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(ROOT / "Makefile", repo / "Makefile")
    shutil.copytree(ROOT / ".githooks", repo / ".githooks")
    git(repo, "init", "-q", "-b", "main", env=env)
    git(repo, "add", ".", env=env)
    git(repo, "commit", "-q", "-m", "x" * 100, env=env)  # no hook yet: anything goes
    made = subprocess.run(["make", "hooks"], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr

    for where in (repo, tmp_path / "tree"):
        if where != repo:
            git(repo, "worktree", "add", "-q", str(where), env=env)
        (where / "f").write_text(str(where))
        git(where, "add", "f", env=env)
        refused = git(where, "commit", "-q", "-m", "y" * 73, env=env, check=False)
        assert refused.returncode != 0 and "the subject is 73 characters; at most 72" in refused.stderr
        git(where, "commit", "-q", "-m", "y" * 72, env=env)
        assert git(where, "log", "-1", "--format=%s", env=env).stdout.strip() == "y" * 72
