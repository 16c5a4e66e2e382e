"""The train loop's NCCL transport check: make NCCL log to a file, then read our own lines back.

Runs on CUDA only (gloo writes no NCCL log). TRAINYARD_EXPECT_TRANSPORT (set by the webhook from
the fabric profile) says what NCCL must use; the decision itself is
:func:`trainer.nccl_log.transport_verdict`, the same one ``trainyard nccl-report --expect`` uses.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from trainer.nccl_log import Verdict, check_own_log, debug_file_for
from trainyard.contract.names import ENV_EXPECT_TRANSPORT


def prepare_nccl_log(env: MutableMapping[str, str]) -> str | None:
    """Before NCCL starts: make sure it writes INFO lines with INIT and NET to a file we can read.

    Returns the NCCL_DEBUG_FILE pattern, or None when no transport is expected. An existing
    NCCL_DEBUG_FILE is kept; otherwise one under the temporary directory is set (the console then
    gets the summary the trainer prints instead of NCCL's INFO lines).
    """
    if not env.get(ENV_EXPECT_TRANSPORT):
        return None
    if not env.get("NCCL_DEBUG_FILE"):
        folder = Path(tempfile.gettempdir()) / "trainyard-nccl"
        folder.mkdir(parents=True, exist_ok=True)
        env["NCCL_DEBUG_FILE"] = str(folder / "nccl.%h.%p.log")
    if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        env["NCCL_DEBUG"] = "INFO"
    subsys = env.get("NCCL_DEBUG_SUBSYS", "")
    if subsys and not subsys.startswith("^"):
        wanted = {s.strip().upper() for s in subsys.split(",")}
        if "ALL" not in wanted:
            missing = [s for s in ("INIT", "NET") if s not in wanted]
            if missing:
                env["NCCL_DEBUG_SUBSYS"] = ",".join([subsys, *missing])
    return env["NCCL_DEBUG_FILE"]


def own_log_path(pattern: str, pid: int | None = None) -> Path:
    # NCCL's %h is the host name up to the first dot.
    return Path(debug_file_for(pattern, socket.gethostname().split(".")[0], os.getpid() if pid is None else pid))


@dataclass(frozen=True, slots=True)
class TransportCheck:
    verdict: Verdict
    used: str | None  # the transport NCCL chose for this process; None when its log does not say
    expected: str | None  # what the fabric promises (TRAINYARD_EXPECT_TRANSPORT); None: no promise


def check_after_first_collective(pattern: str, expect: str | None, allow_fallback: bool) -> TransportCheck:
    verdict, used = check_own_log(own_log_path(pattern), os.getpid(), expect, allow_fallback)
    return TransportCheck(verdict, used, expect)
