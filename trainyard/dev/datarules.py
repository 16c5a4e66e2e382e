"""Which tests read the repository's files that are not Python: a small explicit table.

The test map follows imports for Python; a YAML profile, a kustomize base or the Makefile is read
by tests through paths, which imports do not show. Each rule names a path (a file, or a folder
ending in ``/``) and the test files or folders that read it; the longest matching path wins. A
rule with no tests says that no test reads the file; :data:`EVERY_TEST` runs the whole suite.
``tests/trainyard/dev/test_datarules.py`` keeps the table honest: every test named reads the
path, and every test that names a path in its source is listed under it.
"""

from __future__ import annotations

from dataclasses import dataclass

EVERY_TEST = ("tests/",)


@dataclass(frozen=True)
class DataRule:
    path: str  # a file, or a folder ending in "/"
    tests: tuple[str, ...]  # test files and folders (ending in "/") that read it; () none does
    what: str  # what the path holds, shown as the reason

    def matches(self, rel: str) -> bool:
        return rel.startswith(self.path) if self.path.endswith("/") else rel == self.path


# The GitOps repository is read by the repository tooling's tests, the cluster tier (it syncs every
# cluster) and the demo; base/, overlays/ and clusters/ are rendered together.
_RENDERED = ("tests/trainyard/repo/", "tests/trainyard/cluster/", "tests/e2e/", "tests/monitoring/test_rules.py")

DATA_RULES: tuple[DataRule, ...] = (
    DataRule("policies/", ("tests/webhook/", *_RENDERED[:3], "tests/contract/test_nccl_lint.py"), "the FabricProfiles"),
    DataRule("base/", _RENDERED, "the kustomize bases every cluster renders"),
    DataRule("overlays/", _RENDERED[:3], "the clusters' platform patches and job folders"),
    DataRule("clusters/", _RENDERED[:3], "each cluster's entry point and declared facts"),
    DataRule("kube/", _RENDERED[:3], "the Go modules: pinned upstream releases, the cluster tier's builds"),
    DataRule("examples/", ("tests/webhook/", "tests/trainyard/cluster/test_admission.py"), "the example pods"),
    DataRule("bench/README.md", (), "the measured figures"),
    DataRule("bench/results/", (), "the benchmarks' last results"),
    DataRule("bench/", ("tests/trainer/test_bench.py", "tests/webhook/test_cluster_pods.py"), "the benchmarks"),
    DataRule("docs/observability.md", ("tests/monitoring/test_rules.py",), "the alerts' runbooks"),
    DataRule("docs/", (), "the documentation"),
    DataRule("README.md", (), "the newcomer's page"),
    DataRule(
        "Makefile",
        (
            "tests/test_makefile.py",
            "tests/monitoring/test_promtool_target.py",
            "tests/test_hooks.py",
            "tests/trainyard/dev/test_make_test_changed.py",
        ),
        "the make targets",
    ),
    DataRule(".githooks/", ("tests/test_hooks.py",), "the git hooks make hooks installs"),
    DataRule("pyproject.toml", EVERY_TEST, "the dependencies and pytest's configuration"),
    DataRule(".github/CODEOWNERS", ("tests/test_codeowners.py",), "who approves what"),
    DataRule(".github/workflows/", (), "the CI workflow (CI runs it)"),
    DataRule(".ci/", (), "the CI entry point (it runs make test)"),
    DataRule(".gitignore", (), "what git ignores"),
    DataRule(".dockerignore", (), "what the image builds leave out"),
    DataRule("webhook/Dockerfile", ("tests/test_floors.py",), "the webhook image"),
    DataRule("trainer/Dockerfile", ("tests/test_floors.py", "tests/contract/test_nccl_lint.py"), "the trainer image"),
    DataRule("tests/corpus/", ("tests/trainyard/cluster/test_verdict.py",), "the corpus of upstream-style jobs"),
    DataRule("tests/trainer/fixtures/", ("tests/trainer/",), "NCCL logs and RAS samples"),
    DataRule("tests/monitoring/rules/", ("tests/monitoring/test_rules.py",), "the alert rules' unit tests"),
    DataRule(
        "tests/trainyard/repo/upstream/fixtures/",
        ("tests/trainyard/repo/upstream/test_health_lua.py",),
        "Argo CD's own test data",
    ),
)


def rule_for(rel: str, rules: tuple[DataRule, ...] = DATA_RULES) -> DataRule | None:
    """The rule of the longest path matching ``rel`` (a path relative to the repository root)."""
    found = [r for r in rules if r.matches(rel)]
    return max(found, key=lambda r: len(r.path)) if found else None
