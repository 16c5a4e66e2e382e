"""The test map on a small repository written here: import chains, a lazy import, ``from p import
m`` of a submodule, relative imports, a module run with ``-m`` and one imported by name, conftests,
data rules; and the refusals of hostile input, each beside the benign form that works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainyard.cli import main
from trainyard.contract.errors import UserError
from trainyard.dev.datarules import EVERY_TEST, DataRule
from trainyard.dev.imports import imports_of
from trainyard.dev.testmap import SourceTree, changed_files, relative_paths, select, unmirrored

SOURCES = {
    "pkg/__init__.py": "",
    "pkg/base.py": "X = 1\n",
    "pkg/mid.py": "from pkg import base\n",  # a submodule imported by ``from``
    "pkg/top.py": "def f():\n    import pkg.mid\n",  # lazy: inside a function
    "pkg/sub/__init__.py": "from . import leaf\n",  # relative, in a package's __init__
    "pkg/sub/leaf.py": "from ..base import X\n",  # relative, two levels
    "pkg/other.py": "",
    "pkg/runner.py": "import importlib\nNAMES = ('pkg.other',)\n\n\n"
    "def load():\n    return [importlib.import_module(n) for n in NAMES]\n",
    "pkg/lonely.py": "",
    "tool/__init__.py": "",
    "tool/main.py": "print('run')\n",
    "tests/__init__.py": "",
    "tests/conftest.py": "",
    "tests/a/__init__.py": "",
    "tests/a/conftest.py": "",
    "tests/a/test_base.py": "from pkg.base import X\n\n\ndef test_x():\n    assert X == 1\n",
    "tests/a/test_mid.py": "from pkg import mid\n",
    "tests/b/__init__.py": "",
    "tests/b/helper.py": "from pkg import runner\n",
    "tests/b/test_top.py": "from pkg.top import f\n",
    "tests/b/test_sub.py": "import pkg.sub\n",
    "tests/b/test_runner.py": "from .helper import runner\n",
    "tests/c/__init__.py": "",
    "tests/c/conftest.py": "import pkg.other\n",
    "tests/c/test_tool.py": "import subprocess\nimport sys\n\n\n"
    "def test_run():\n    subprocess.run([sys.executable, '-m', 'tool.main'], check=True)\n",
    "data/things.yaml": "a: 1\n",
    "docs/readme.md": "# docs\n",
    "pkg/schemas/pod.json": "{}\n",
    "weird.txt": "?\n",
}
RULES = (
    DataRule("data/", ("tests/b/",), "things"),
    DataRule("docs/", (), "the documentation"),
    DataRule("config.toml", EVERY_TEST, "the configuration"),
)
A = ["tests/a/test_base.py", "tests/a/test_mid.py"]
B = ["tests/b/test_runner.py", "tests/b/test_sub.py", "tests/b/test_top.py"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel, text in SOURCES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def selected(root: Path, *changed: str) -> list[str]:
    sel = select(SourceTree.load(root), changed, RULES)
    assert not sel.everything
    return sorted(sel.tests)


@pytest.mark.parametrize(
    ("changed", "tests"),
    [
        # through `from pkg import base`, a lazy import two steps away, and pkg.sub's relative imports
        ("pkg/base.py", [*A, "tests/b/test_sub.py", "tests/b/test_top.py"]),
        ("pkg/mid.py", ["tests/a/test_mid.py", "tests/b/test_top.py"]),
        ("pkg/sub/leaf.py", ["tests/b/test_sub.py"]),
        # imported by name (importlib) from runner, and imported by tests/c's conftest
        ("pkg/other.py", ["tests/b/test_runner.py", "tests/c/test_tool.py"]),
        # a package's __init__ runs before any of its modules
        ("pkg/__init__.py", [*A, *B, "tests/c/test_tool.py"]),
        ("tool/main.py", ["tests/c/test_tool.py"]),  # run with python -m in a subprocess
        ("tests/b/helper.py", ["tests/b/test_runner.py"]),
        ("tests/a/test_mid.py", ["tests/a/test_mid.py"]),
        ("tests/a/conftest.py", A),
        ("tests/conftest.py", [*A, *B, "tests/c/test_tool.py"]),
        ("data/things.yaml", B),
        ("pkg/schemas/pod.json", [*A, *B, "tests/c/test_tool.py"]),  # data of the package pkg
        ("docs/readme.md", []),
        ("pkg/lonely.py", []),
    ],
)
def test_the_tests_that_cover_a_change(repo, changed, tests):
    assert selected(repo, changed) == sorted(tests)


def test_each_test_says_why(repo):
    sel = select(SourceTree.load(repo), ["pkg/base.py", "tests/a/test_base.py", "data/things.yaml"], RULES)
    assert sel.tests["tests/a/test_base.py"] == ["imports pkg.base", "changed"]
    assert sel.tests["tests/b/test_top.py"] == [
        "reaches pkg.base: pkg.top -> pkg.mid -> pkg.base",
        "reads data/ (things)",
    ]
    assert sel.tests["tests/b/test_sub.py"][0] == "reaches pkg.base: pkg.sub -> pkg.sub.leaf -> pkg.base"
    sel = select(SourceTree.load(repo), ["pkg/other.py", "docs/readme.md", "pkg/lonely.py"], RULES)
    assert sel.tests["tests/c/test_tool.py"] == ["reaches pkg.other: tests.c.conftest -> pkg.other"]
    assert sel.tests["tests/b/test_runner.py"] == ["reaches pkg.other: tests.b.helper -> pkg.runner -> pkg.other"]
    assert sel.untested == {
        "docs/readme.md": "no test reads it (the documentation)",
        "pkg/lonely.py": "no test file imports it",
    }


@pytest.mark.parametrize(
    ("changed", "why"),
    [
        ("weird.txt", "weird.txt: no rule maps it to tests (trainyard/dev/datarules.py)"),
        ("config.toml", "config.toml: the configuration"),
    ],
)
def test_an_unmapped_file_runs_every_test(repo, changed, why):
    sel = select(SourceTree.load(repo), ["pkg/mid.py", changed], RULES)
    assert sel.everything == [why]


def test_a_relative_import_in_a_package_init_resolves_against_the_package():
    assert [i.target for i in imports_of("from . import leaf\nfrom .. import up", "a.b", package=True)] == ["a.b", "a"]
    assert [i.target for i in imports_of("from . import leaf\nfrom .. import up", "a.b")] == ["a", ""]


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=60)
    return done.stdout


@pytest.fixture
def checkout(repo):
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "main")
    git(repo, "checkout", "-q", "-b", "work")
    return repo


def test_what_changed_against_main_comes_from_git(checkout):
    (checkout / "pkg/mid.py").write_text("from pkg import base\nY = 2\n")  # committed on the branch
    git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-am", "mid")
    (checkout / "data/things.yaml").write_text("a: 2\n")  # uncommitted
    (checkout / "pkg/other.py").unlink()  # deleted: the tests that import it still run
    (checkout / "tests/b/test_new.py").write_text("")  # untracked
    (checkout / "junk.pyc").write_text("")
    (checkout / ".gitignore").write_text("*.pyc\n")
    git(checkout, "add", ".gitignore")
    git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "ignore")
    changed = changed_files(checkout, "main")
    assert changed == [".gitignore", "data/things.yaml", "pkg/mid.py", "pkg/other.py", "tests/b/test_new.py"]
    sel = select(SourceTree.load(checkout), changed[1:], RULES)
    assert sorted(sel.tests) == sorted(["tests/a/test_mid.py", *B, "tests/b/test_new.py", "tests/c/test_tool.py"])


def test_a_bad_base_is_named(checkout):
    with pytest.raises(UserError, match=r"--base nowhere: no merge base with HEAD .*name another ref"):
        changed_files(checkout, "nowhere")
    with pytest.raises(UserError, match="does not start with '-'"):
        changed_files(checkout, "--output=/tmp/x")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"x = '\xff'\n", r"pkg/bad.py: not UTF-8 \(byte 0xff at offset 5\).*save it as UTF-8"),
        (b"def (:\n", r"pkg/bad.py:1: not valid Python \(invalid syntax\).*fix it first"),
        (b"x = 1\x00\n", r"pkg/bad.py: not valid Python .*null bytes.*fix it first"),
    ],
)
def test_a_source_that_cannot_be_read_is_named(repo, content, message):
    (repo / "pkg/bad.py").write_bytes(content)
    with pytest.raises(UserError, match=message):
        SourceTree.load(repo)
    (repo / "pkg/bad.py").write_bytes(b"x = '\xc3\xa9'\n")  # the benign form: UTF-8 that parses
    assert "pkg.bad" in SourceTree.load(repo).index


def test_a_source_too_large_or_a_link_out_of_the_repository_is_refused(repo, tmp_path):
    (repo / "pkg/alias.py").symlink_to(repo / "pkg/base.py")  # the benign form: a link inside
    assert "pkg.alias" in SourceTree.load(repo).index
    (tmp_path / "elsewhere.py").write_text("import os\n")
    (repo / "pkg/evil.py").symlink_to(tmp_path / "elsewhere.py")
    with pytest.raises(UserError, match=r"^pkg/evil.py: a link out of the repository"):
        SourceTree.load(repo)
    (repo / "pkg/evil.py").unlink()
    (repo / "pkg/big.py").write_text("#" * (1024 * 1024) + "\n")
    with pytest.raises(UserError, match=r"pkg/big.py: a Python source is 1048577 bytes, over the bound"):
        SourceTree.load(repo)


def test_files_are_read_relative_to_where_the_command_runs(repo, tmp_path):
    assert relative_paths(repo, repo / "pkg", ["base.py", "../data", "sub/../mid.py"]) == [
        "pkg/base.py",
        "data/things.yaml",
        "pkg/mid.py",
    ]
    (tmp_path / "outside.py").write_text("")
    for name in (str(tmp_path / "outside.py"), "../../outside.py", "/etc/passwd"):
        with pytest.raises(UserError, match=r"outside the repository .*name files in it"):
            relative_paths(repo, repo / "pkg", [name])
    with pytest.raises(UserError, match=r"^'pkg/no\\nsuch.py': no such file \(a deleted file is found from git"):
        relative_paths(repo, repo, ["pkg/no\nsuch.py"])
    with pytest.raises(UserError, match="the whole repository"):
        relative_paths(repo, repo / "pkg", [".."])


def test_a_name_the_system_cannot_take_is_named(repo):
    for given_name, why in [("a" * 5000, "File name too long"), ("a\x00b", "embedded null byte")]:
        with pytest.raises(UserError, match=f"cannot be read .*{why}.*name a file of the repository") as exc:
            relative_paths(repo, repo, [given_name])
        assert len(str(exc.value)) < 400  # the name is cut, not echoed whole
    (repo / "loop").symlink_to(repo / "loop")
    with pytest.raises(UserError, match=r"^loop: cannot be read \(Too many levels of symbolic links\)"):
        relative_paths(repo, repo, ["loop"])


PART = st.sampled_from(["a", "/", ".", "..", "pkg", "base.py", "\x00", "\n", "é", "\udcff", "~", " ", "a" * 300])
NAME = st.lists(PART, max_size=12).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(NAME | st.text(max_size=30), max_size=3))
def test_any_file_argument_is_a_path_in_the_repository_or_a_refusal(repo, names):
    try:
        found = relative_paths(repo, repo / "pkg", names)
    except UserError as exc:
        assert str(exc).count("\n") == 0
        return
    for rel in found:
        assert not rel.startswith(("/", "../")) and (repo / rel).is_file()


def test_modules_without_a_test_of_their_name(repo):
    assert unmirrored(SourceTree.load(repo)) == [
        ("pkg/lonely.py", 0),
        ("pkg/other.py", 2),
        ("pkg/sub/leaf.py", 1),
        ("tool/main.py", 1),
    ]  # base, mid, top and runner have a test_<name>.py; pkg/__init__.py and pkg/sub/__init__.py are packages


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["dev", "tests", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_prints_each_test_and_why(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo / "pkg")
    code, out, _ = cli(capsys, "--root", str(repo), "mid.py", "../weird.txt")
    assert code == 0
    assert out.splitlines() == [
        "every test runs: weird.txt: no rule maps it to tests (trainyard/dev/datarules.py)",
        "every test file for 2 changed files (the files named)",
    ]
    code, out, _ = cli(capsys, "--root", str(repo), "mid.py", "lonely.py")
    assert out.splitlines() == [
        "tests/a/test_mid.py: imports pkg.mid",
        "tests/b/test_top.py: reaches pkg.mid: pkg.top -> pkg.mid",
        "no test for pkg/lonely.py: no test file imports it",
        "2 test files for 2 changed files (the files named)",
    ]
    assert cli(capsys, "--root", str(repo), "--paths", "mid.py")[1] == "tests/a/test_mid.py\ntests/b/test_top.py\n"
    assert cli(capsys, "--root", str(repo), "--paths", "lonely.py")[1] == ""
    assert cli(capsys, "--root", str(repo), "--paths", "mid.py", "../weird.txt")[1] == "tests\n"
    # nothing covers it: --run says so and runs no pytest
    code, out, _ = cli(capsys, "--root", str(repo), "--run", "lonely.py")
    assert (code, out.splitlines()[0]) == (0, "no test for pkg/lonely.py: no test file imports it")


def test_the_command_refuses_hostile_input_in_one_line(repo, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(repo)
    (repo / "pkg/bad.py").write_bytes(b"\xfe\xff")
    for args, message in [
        (["--root", str(repo), "pkg/mid.py"], "error: pkg/bad.py: not UTF-8 (byte 0xfe at offset 0)"),
        (["pkg/mid.py"], f"error: {repo} is not in a git checkout of trainyard; run it in one or pass --root"),
        (["--root", str(tmp_path), "x"], "error: --root"),
        (["pkg/mid.py", "--", "-x"], "error: arguments after -- go to pytest: add --run"),
        (["--root", str(repo), "--unmirrored", "pkg/mid.py"], "error: --unmirrored lists modules"),
    ]:
        code, out, err = cli(capsys, *args)
        assert (code, out) == (2, "") and err.startswith(message) and err.count("\n") == 1, err


def test_the_command_runs_the_selection_with_pytest(repo, capsys):
    pytest_args = ["-q", "-p", "no:cacheprovider", "-k", "test_x"]
    code = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainyard.cli",
            "dev",
            "tests",
            "--root",
            str(repo),
            "--run",
            "pkg/base.py",
            "--",
            *pytest_args,
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert code.returncode == 0, code.stdout + code.stderr
    assert "tests/a/test_base.py: imports pkg.base" in code.stdout
    assert "1 passed" in code.stdout
