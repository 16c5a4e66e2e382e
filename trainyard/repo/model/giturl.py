"""Git repository URLs compared as Argo CD compares them (argo-cd@v3.6.2:util/git/git.go
NormalizeGitURL), for the URL forms this repository writes.

NormalizeGitURL lower-cases the URL and trims white space; an SSH URL written ``git@host:path``
(sshURLRegex ``^(ssh://)?([^/:]*?)@[^@]+$``) gets its first ``:`` replaced by ``/`` and ``ssh://`` put
in front; one trailing ``.git`` is dropped; the result is parsed and printed by Go's net/url and
``ssh://`` is dropped again. A trailing ``/`` stays: ``…/repo/`` and ``…/repo`` are different
repositories to Argo CD. For ``[scheme://][user@]host[:port][/path]`` (``scheme:///path`` too) written with lower-case
letters, digits and ``. _ ~ - /`` (what this repository's URLs are) net/url prints the URL as it
reads it, so that is the normal form. Any other URL (escapes, queries, fragments, passwords, other
characters, anything outside ASCII) is refused with :class:`UrlNotEmulated`, never compared
differently.
"""

from __future__ import annotations

import re

_SSH_URL = re.compile(r"(ssh://)?([^/:]*?)@[^@]+\Z", re.DOTALL)
# a host may be empty only after a scheme (file:///path)
_SIMPLE = re.compile(r"(?:[a-z][a-z0-9+.-]*://(?:[a-z0-9._-]+@)?[a-z0-9._~-]*|(?:[a-z0-9._-]+@)?[a-z0-9._~-]+)"
                     r"(?::[0-9]+)?(?:/[a-z0-9._~/-]*)?")  # fmt: skip
MAX_URL = 2048


class UrlNotEmulated(ValueError):
    """A URL whose normalisation trainyard does not emulate; the message says which forms it reads."""


def normalize_git_url(repo: str) -> str:
    """NormalizeGitURL for the simple forms above; UrlNotEmulated for any other URL."""
    text = repo.strip(" \t\n\v\f\r").lower()
    if text in ("", "*"):  # net/url reads "*" as the path "*"; AppProjects write it alone
        return text
    simple = len(text) <= MAX_URL and repo.isascii()  # bounds the regular expressions below
    if simple and _SSH_URL.match(text) and not text.startswith("ssh://"):
        text = "ssh://" + text.replace(":", "/", 1)
    text = text.removesuffix(".git")
    if not simple or not _SIMPLE.fullmatch(text):
        raise UrlNotEmulated(
            f"{repo[:100]!r} is not a URL form trainyard normalises offline ([scheme://][user@]host[:port][/path] "
            "of letters, digits and . _ ~ - /, or git@host:path); the real Argo CD judges it in the cluster tier"
        )
    return text.removeprefix("ssh://")
