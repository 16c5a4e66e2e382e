"""glibc malloc settings of the webhook (webhook.memory), checked in a fresh process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from webhook import memory

pytestmark = pytest.mark.skipif(memory._LIBC is None, reason="needs glibc")

# A TLS session over memory BIOs; the server side reads each record the way uvloop's TLS layer
# does (SSLObject.read(256 KiB), uvloop/sslproto.pyx SSLProtocol._do_read__copied), and the
# process counts its page faults over the reads.
READS = textwrap.dedent(
    """
    import resource, ssl, sys
    from pathlib import Path
    from webhook import memory
    from webhook.certs import generate
    if sys.argv[1] == "configure":
        assert memory.configure()
    tls = Path(sys.argv[2])
    generate(tls)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tls / "tls.crt", tls / "tls.key")
    client_ctx = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    bios = [ssl.MemoryBIO() for _ in range(4)]
    server = server_ctx.wrap_bio(bios[0], bios[1], server_side=True)
    client = client_ctx.wrap_bio(bios[2], bios[3], server_hostname="localhost")
    def pump():
        bios[0].write(bios[3].read())
        bios[2].write(bios[1].read())
    for _ in range(10):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        pump()
    body = b"x" * 2000
    def one():
        client.write(body)
        pump()
        assert len(server.read(256 * 1024)) == len(body)
    for _ in range(100):
        one()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(2000):
        one()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


def faults(mode: str, tmp_path) -> int:
    out = subprocess.run(
        [sys.executable, "-c", READS, mode, str(tmp_path / mode)], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


def test_a_tls_read_of_256_kib_stays_in_the_heap(tmp_path):
    """Each 256 KiB read buffer, shrunk to the record's size, must not get pages of its own (an
    mmap, mremap and munmap and fresh page faults per read): measured, a quarter of the
    webhook's throughput when the threshold was 128 KiB."""
    assert memory.MMAP_THRESHOLD > 256 * 1024
    assert faults("configure", tmp_path) < 200  # 2,000 reads


def test_the_count_sees_a_read_that_gets_pages_of_its_own(tmp_path):
    """The same reads under a threshold below 256 KiB fault on every read: the test above can fail."""
    script = READS.replace("assert memory.configure()", "memory._LIBC.mallopt(memory.M_MMAP_THRESHOLD, 128 * 1024)")
    out = subprocess.run(
        [sys.executable, "-c", script, "configure", str(tmp_path / "low")], capture_output=True, text=True, check=True
    )
    assert int(out.stdout) >= 2000
