"""Process group set-up: backend by device, gloo on the fabric interface, one process or many.

Under torchrun's shared store (``TORCHELASTIC_USE_AGENT_STORE=True``, torchrun's default) the group
is set up in a namespace of the store that no earlier round of workers wrote (:mod:`trainer.rounds`),
so a restart never meets the keys of the round it replaces, whatever launched torchrun.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from trainer import rounds
from trainer.interfaces import gloo_ifname
from trainyard.contract.errors import UserError
from trainyard.contract.nccl import GLOO_SOCKET_IFNAME, SOCKET_IFNAME


@dataclass(slots=True)
class World:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    # A gloo group for checkpoint I/O and small object exchanges: DCP needs a CPU backend, and
    # async saves must not share a group with the training collectives running meanwhile.
    cpu_group: dist.ProcessGroup
    setup_ms: float = 0.0  # process-group set-up: store, generation, default and cpu groups
    group_ready: float = 0.0  # epoch seconds when it was done

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def follow_fabric_interface(env: MutableMapping[str, str] = os.environ) -> str | None:
    """Set GLOO_SOCKET_IFNAME from NCCL_SOCKET_IFNAME when it is unset, so gloo uses the fabric too.

    Returns the value set, or None when nothing was changed.
    """
    if env.get(GLOO_SOCKET_IFNAME) or not env.get(SOCKET_IFNAME):
        return None
    name = gloo_ifname(env[SOCKET_IFNAME])
    if name is None:
        print(
            f"warning: NCCL_SOCKET_IFNAME={env['NCCL_SOCKET_IFNAME']} matches no interface that is up with an "
            "address; gloo picks its own (run `trainyard preflight`)",
            file=sys.stderr,
        )
        return None
    env[GLOO_SOCKET_IFNAME] = name
    return name


def init(device_choice: str) -> World:
    if device_choice == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda, but torch sees no CUDA device; use --device cpu or run on a GPU node")
    use_cuda = device_choice == "cuda" or (device_choice == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    follow_fabric_interface()
    if use_cuda:
        if local_rank >= torch.cuda.device_count():
            raise UserError(
                f"local rank {local_rank} has no GPU: {torch.cuda.device_count()} visible; "
                "start at most one process per GPU (--nproc-per-node)"
            )
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    t0 = time.perf_counter()
    if not dist.is_initialized():
        _init_process_group(backend)
    cpu_group = dist.new_group(backend="gloo")
    return World(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        device=device,
        backend=backend,
        cpu_group=cpu_group,
        setup_ms=(time.perf_counter() - t0) * 1000,
        group_ready=time.time(),
    )


def shares_agent_store(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the store at MASTER_ADDR:MASTER_PORT is torchrun's, kept across restarts (the test
    torch itself makes: ``torch/distributed/rendezvous.py:_torchelastic_use_agent_store``)."""
    return env.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)


def _init_process_group(backend: str) -> None:
    """The default group: in this round's namespace when the store is torchrun's shared one."""
    env = os.environ
    if not ("RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env):  # one process, no launcher
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
        return
    if not shares_agent_store(env):  # a store of this round alone (rank 0 serves it)
        dist.init_process_group(backend=backend)
        return
    from torch.distributed.constants import default_pg_timeout
    from torch.distributed.rendezvous import rendezvous

    store, rank, world_size = next(rendezvous("env://", timeout=default_pg_timeout))
    store, _ = rounds.round_store(store, rank, world_size, default_pg_timeout)
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size)


def broadcast_object(obj: object, world: World) -> object:
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=world.cpu_group)
    return box[0]
