"""``trainyard dev tests``: the developer's commands, on trainyard's own source."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from trainyard.contract.argv import AddParser
from trainyard.contract.errors import UserError
from trainyard.dev import testmap
from trainyard.dev.testmap import TESTS, Selection, shown


def register(add_parser: AddParser) -> None:
    p = add_parser(
        "dev",
        help="developer tools on trainyard's own source: which tests cover a change",
        description="Tools for changing trainyard itself, reading its source from the git checkout.",
    )
    p.set_defaults(takes_passthrough=True)
    sub = p.add_subparsers(dest="dev_command", metavar="DEV_COMMAND", required=True)
    t = sub.add_parser(
        "tests",
        help="the test files that cover the changed files, and why",
        description="Print the test files that cover FILE... (default: what changed against --base: committed "
        "since the merge base, uncommitted and untracked files), each with why: the changed module it imports, "
        "directly or through the modules it imports (read from the source, as tests/test_floors.py does), the "
        "folder of a changed conftest.py, the test file itself, or the data a test reads "
        "(trainyard/dev/datarules.py). A file no rule maps runs every test, and says so.",
        usage="trainyard dev tests [FILE...] [--base REF] [--paths | --run [-- PYTEST ARGS]] | --unmirrored",
    )
    t.add_argument("files", nargs="*", metavar="FILE", help="changed files or folders (default: from git)")
    t.add_argument("--base", default="main", metavar="REF", help="the git ref to compare with (default main)")
    t.add_argument("--root", metavar="DIR", help="the checkout (default: the git top level of the current folder)")
    t.add_argument("--paths", action="store_true", help="print only the test files, one a line (tests when all)")
    t.add_argument("--run", action="store_true", help="run them with pytest; arguments after -- go to pytest")
    t.add_argument(
        "--unmirrored",
        action="store_true",
        help="list the modules with no test file of the same name (test_<module>.py), each with how many test "
        "files cover it",
    )
    t.set_defaults(func=_tests)


def _tests(args: argparse.Namespace) -> int:
    if args.passthrough is not None and not args.run:
        raise UserError("arguments after -- go to pytest: add --run")
    if args.unmirrored and (args.files or args.run or args.paths):
        raise UserError("--unmirrored lists modules; it takes no FILE, --run or --paths")
    cwd = Path.cwd()
    root = Path(args.root).resolve() if args.root else testmap.repository_root(cwd)
    if args.root and not (root / TESTS).is_dir():
        raise UserError(f"--root {shown(args.root)}: no {TESTS}/ folder there")
    tree = testmap.SourceTree.load(root)
    if args.unmirrored:
        found = testmap.unmirrored(tree)
        for rel, n in found:
            print(f"{rel}: no test_{rel.rsplit('/', 1)[-1]}; covered by {n} test file{'s' if n != 1 else ''}")
        print(f"{len(found)} modules have no test file of the same name")
        return 0
    changed = testmap.relative_paths(root, cwd, args.files) if args.files else testmap.changed_files(root, args.base)
    sel = testmap.select(tree, changed)
    _print(sel, changed, args)
    if not args.run:
        return 0
    if not sel.everything and not sel.tests:
        return 0
    paths = [] if sel.everything else sorted(sel.tests)
    done = subprocess.run([sys.executable, "-m", "pytest", *paths, *(args.passthrough or [])], cwd=root, check=False)
    return done.returncode


def _print(sel: Selection, changed: list[str], args: argparse.Namespace) -> None:
    if args.paths:
        print(
            TESTS if sel.everything else "\n".join(sorted(sel.tests)), end="\n" if sel.everything or sel.tests else ""
        )
        return
    against = "the files named" if args.files else f"{args.base}'s merge base, uncommitted and untracked files"
    if not changed:
        print(f"nothing changed against {against}")
        return
    for test, whys in [] if sel.everything else sorted(sel.tests.items()):
        more = f" (+{len(whys) - 1} more)" if len(whys) > 1 else ""
        print(f"{shown(test)}: {whys[0]}{more}")
    for rel, why in sel.untested.items():
        print(f"no test for {shown(rel)}: {why}")
    for why in sel.everything:
        print(f"every test runs: {shown(why)}")
    n = "every test file" if sel.everything else f"{len(sel.tests)} test file{'s' if len(sel.tests) != 1 else ''}"
    print(f"{n} for {len(changed)} changed file{'s' if len(changed) != 1 else ''} ({against})")
