"""rawyaml's C emitter: every generated file is the text PyYAML's Python emitter writes (so `trainyard
generate` gives the same files whichever PyYAML build runs it), and whatever it writes reads back."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.trainyard.repo.conftest import REPO_ROOT
from trainyard.repo.generate import files, pod_security
from trainyard.repo.model import rawyaml, repository


def python_dump_all(docs: list, **options: object) -> str:
    return yaml.dump_all(docs, Dumper=yaml.SafeDumper, **options)  # type: ignore[call-overload, no-any-return]


def test_the_c_emitter_is_the_one_used() -> None:
    assert rawyaml.SafeDumper is yaml.CSafeDumper and rawyaml.SafeLoader is yaml.CSafeLoader


def test_every_generated_file_is_what_the_python_emitter_writes(monkeypatch) -> None:
    repo = repository.load(REPO_ROOT)
    fast = {g.path: g.text for g in files.expected(repo)}

    class PythonDumper(yaml.SafeDumper):
        pass

    PythonDumper.add_representer(str, pod_security._str)
    monkeypatch.setattr(rawyaml, "safe_dump_all", python_dump_all)
    monkeypatch.setattr(rawyaml, "safe_dump", lambda doc, **o: python_dump_all([doc], **o))
    monkeypatch.setattr(pod_security, "_Dumper", PythonDumper)
    monkeypatch.setattr("trainyard.repo.generate.priority._Dumper", PythonDumper)
    slow = {g.path: g.text for g in files.expected(repo)}
    assert len(fast) > 20
    assert fast == slow


# scalars that make an emitter choose quotes, escapes, folding or a block style
TEXT = st.one_of(
    st.text(max_size=200),
    st.sampled_from(["", "~", "null", "yes", "on", "0x1F", "1e3", "- a", "a: b", "#x", "'", '"', " a", "a ", "\t"]),
    st.text(alphabet="ab :#'\"\\\n\t-{}[],&*!|>%@`\u00e9\u2028\ufeff\x85\x00", max_size=120),
)
VALUES = st.recursive(
    st.one_of(TEXT, st.integers(), st.floats(allow_nan=False), st.booleans(), st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=25,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=3), st.sampled_from([None, 80]))
def test_anything_written_reads_back_as_it_was(docs, width) -> None:
    """Not always the Python emitter's text (libyaml folds some escaped strings elsewhere, writes an
    empty key inline and ends no lone scalar document with "..."), but always the same data."""
    text = rawyaml.safe_dump_all(docs, **({"width": width} if width else {}))
    assert list(yaml.safe_load_all(text)) == docs
    assert list(yaml.load_all(text, Loader=rawyaml.SafeLoader)) == docs
