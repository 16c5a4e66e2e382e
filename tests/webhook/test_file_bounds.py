"""Every file the webhook reads or reloads has a size bound: a 50 MB file (sparse, so it costs
no disk) is refused from its size, naming the file, its size and the bound, and what was loaded
before keeps serving; the same files of a normal size still load."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from tests.webhook.conftest import POLICIES, ROOT
from trainyard.contract.errors import UserError
from trainyard.contract.files import MAX_CONFIG_BYTES
from webhook.certs import generate
from webhook.mutate_file import read_document
from webhook.policy import PolicyError, load_policies
from webhook.tls import CertificateRefused, CertStore

BIG = 50 * 1024 * 1024


def sparse(path: Path, size: int = BIG) -> Path:
    path.unlink(missing_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return path


@pytest.fixture
def no_reads_of_big_files(monkeypatch):
    """Fail the test if anything reads more than the bound in one go from any file."""
    real = os.read

    def bounded(fd: int, n: int) -> bytes:
        assert n <= MAX_CONFIG_BYTES + 1, f"a read of {n} bytes"
        return real(fd, n)

    monkeypatch.setattr(os, "read", bounded)


def test_an_oversized_client_ca_reload_is_refused_and_the_previous_one_keeps_verifying(tmp_path: Path):
    generate(tmp_path)
    client_ca = tmp_path / "client-ca.crt"
    shutil.copyfile(tmp_path / "ca.crt", client_ca)
    store = CertStore(tmp_path, server_name=None, client_ca=client_ca)
    before = store.current
    assert before.verify_mode == ssl.CERT_REQUIRED

    sparse(client_ca)
    result = store.reload_if_changed()
    assert result is not None and not result.loaded and result.reason == "client_ca"
    assert str(client_ca) in result.message and f"{BIG} bytes" in result.message
    assert f"bound of {MAX_CONFIG_BYTES} bytes" in result.message
    assert store.current is before  # the last good context keeps serving
    assert store.reload_if_changed() is None  # reported once per change

    shutil.copyfile(tmp_path / "ca.crt", client_ca)  # a good bundle again: loaded
    result = store.reload_if_changed()
    assert result is not None and result.loaded and store.current is not before


@pytest.mark.parametrize("name", ["tls.crt", "tls.key"])
def test_an_oversized_certificate_or_key_is_refused_at_start_and_on_reload(tmp_path: Path, name: str):
    generate(tmp_path)
    store = CertStore(tmp_path, server_name=None)
    before = store.current
    good = (tmp_path / name).read_bytes()
    sparse(tmp_path / name)
    result = store.reload_if_changed()
    assert result is not None and not result.loaded and result.reason == "unreadable"
    assert f"{tmp_path / name}: the " in result.message and f"is {BIG} bytes, over the bound" in result.message
    assert store.current is before
    with pytest.raises(CertificateRefused, match=f"{name}: the .* is {BIG} bytes, over the bound of"):
        CertStore(tmp_path, server_name=None)
    (tmp_path / name).write_bytes(good)
    assert CertStore(tmp_path, server_name=None).current.verify_mode == ssl.CERT_NONE


def test_an_oversized_profile_file_is_refused_before_it_is_read(tmp_path: Path, no_reads_of_big_files):
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    assert load_policies(policies).profiles  # the benign set loads
    sparse(policies / "huge.yaml")
    with pytest.raises(PolicyError, match=rf"huge\.yaml: the profile file is {BIG} bytes, over the bound of"):
        load_policies(policies)


def test_profile_files_together_over_one_configmap_are_refused(tmp_path: Path):
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    filler = "# padding\n" * (MAX_CONFIG_BYTES // 20)  # half the bound each: neither alone is too large
    (policies / "y1.yaml").write_text(filler)
    (policies / "y2.yaml").write_text(filler)
    with pytest.raises(PolicyError, match=r"the profile files up to y2\.yaml hold \d+ bytes, over the bound"):
        load_policies(policies)


def test_an_oversized_document_for_mutate_is_refused(tmp_path: Path):
    from webhook.app import MAX_BODY

    big = sparse(tmp_path / "pod.yaml")
    with pytest.raises(UserError, match=rf"pod\.yaml: the document is {BIG} bytes, over the bound of {MAX_BODY}"):
        read_document(str(big))
    small = tmp_path / "small.yaml"
    small.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    assert read_document(str(small))[0]["kind"] == "Pod"


def test_serve_with_an_oversized_client_ca_says_so_without_a_traceback(tmp_path: Path):
    tls = tmp_path / "tls"
    generate(tls)
    big = sparse(tmp_path / "ca-bundle.crt")
    r = subprocess.run(
        [sys.executable, "-m", "trainyard.cli", "serve", "--port", "1", "--policies", str(POLICIES),
         "--profile", "roce", "--tls-dir", str(tls), "--tls-server-name", "localhost", "--client-ca", str(big)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert f"error: {big}: the client CA bundle is {BIG} bytes, over the bound of {MAX_CONFIG_BYTES}" in r.stderr
    assert "(--client-ca)" in r.stderr and "Traceback" not in r.stderr
