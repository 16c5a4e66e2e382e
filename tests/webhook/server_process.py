"""Kubernetes-style volume updates for server tests.

``AtomicDir`` writes files the way the kubelet updates Secret and ConfigMap volumes: into a new
timestamped directory, then an atomic rename of the ``..data`` symlink, with each visible file
a symlink through ``..data`` (pkg/volume/util/atomic_writer.go).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from trainyard.sandbox.webhook_process import LocalWebhook as Server
from trainyard.sandbox.webhook_process import wait_for

__all__ = ["AtomicDir", "Server", "wait_for"]


class AtomicDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.generation = 0

    def write(self, files: dict[str, bytes]) -> None:
        self.generation += 1
        target = self.path / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{self.generation}"
        target.mkdir()
        for name, data in files.items():
            (target / name).write_bytes(data)
        tmp = self.path / "..data_tmp"
        os.symlink(target.name, tmp)
        os.replace(tmp, self.path / "..data")
        for name in files:
            link = self.path / name
            if not link.is_symlink():
                os.symlink(f"..data/{name}", link)
        for old in self.path.glob("..20*"):
            if old != target:
                for f in old.iterdir():
                    f.unlink()
                old.rmdir()
