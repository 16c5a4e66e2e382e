"""A fresh namespace of torchrun's shared store for every round of workers.

Why: torchrun's agent serves one TCPStore to its workers (MASTER_ADDR:MASTER_PORT,
``TORCHELASTIC_USE_AGENT_STORE=True``) and keeps it across restarts of the worker group, while the
keys a process group writes carry no round in their names. In torch 2.15 (as in 2.13):

- ``torch/distributed/rendezvous.py:_create_c10d_store``: with the agent store (from 2.15: when the
  store asked for is the agent's own ``MASTER_ADDR:MASTER_PORT``, ``_agent_store_serves``, as
  torchrun's env gives it), the workers get a plain TCPStore client; the comment says "We create a
  new TCPStore for every retry so no need to add prefix for each attempt" (torch <= 2.5 wrapped it
  in ``PrefixStore(f"/worker/attempt_{N}")``).
- ``torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:DynamicRendezvousHandler.next_rendezvous``
  creates that server once per agent (``_shared_tcp_store_server``, ``_bootstrap_store_info`` are
  set only while None), and ``elastic/agent/server/api.py:SimpleElasticAgent._rendezvous`` calls it
  on the same handler for every restart: every round gets the same server, still holding the keys
  of the rounds before it. ``elastic/rendezvous/static_tcp_rendezvous.py:StaticTCPRendezvous``
  (torchrun ``--master-addr`` without ``--rdzv-backend``) always shares its one store.
- ``distributed_c10d.py:init_process_group`` only adds ``PrefixStore("default_pg", ...)`` and
  ``_new_process_group_helper`` the group name and device, so gloo's full-mesh keys are
  ``default_pg/0//cpu//0/<rank>`` in every round: a restarted rank reads the address of a dead
  peer (``Gloo connectFullMesh failed ... Connection refused``) or waits forever
  (pytorch/pytorch#135712 reports the same with NCCL's unique id).

``TORCHELASTIC_RESTART_COUNT`` cannot name the round: it is counted per agent
(``local_elastic_agent.py:LocalElasticAgent._start_workers``: ``max_restarts -
remaining_restarts``), and ``api.py:SimpleElasticAgent._invoke_run`` restarts an agent whose
peers changed without counting it, so two agents of one round can hold different counts.

So rank 0 of each round draws a new generation from a counter in the store and every other rank
learns it from rank 0 itself, in a way stale keys cannot fool:

1. rank 0: ``g = add(generation, 1)`` (never reused), reads ``current`` (the previous
   generation, if any) and sets ``current = g``; it then answers every rank waiting in the
   previous generation with a redirect to ``g``, and waits for a hello of every other rank in
   ``g`` (a namespace nobody wrote before) and answers each.
2. rank r != 0: reads ``current``, posts a hello (a nonce of its own process) there, reads
   ``current`` again (if it moved, it starts over with the new value) and waits for rank 0's answer
   to its nonce: either the same generation (done) or a redirect to a newer one. A generation
   read from an earlier round is answered by the next rank 0 (it set ``current`` before it scans,
   and the hello was posted before the second read), so no rank ever uses an old namespace.

All workers of a round are started after every worker of the round before has been stopped (the
agents stop their workers before they rendezvous again), so only one rank 0 is alive at a time.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import torch.distributed as dist

from trainyard.contract.errors import UserError

ROOT = "trainyard/pg"
GENERATION = f"{ROOT}/generation"
CURRENT = f"{ROOT}/current"


def namespace(generation: int) -> str:
    return f"{ROOT}/g{generation}"


def _hello(generation: int, rank: int) -> str:
    return f"{namespace(generation)}/hello/{rank}"


def _answer(generation: int, rank: int, nonce: str) -> str:
    return f"{namespace(generation)}/answer/{rank}/{nonce}"


def _wait(store: dist.Store, keys: list[str], timeout: timedelta, what: str) -> None:
    try:
        store.wait(keys, timeout)
    except dist.DistStoreError:  # a timeout, or the store went away
        missing = [k for k in keys if not store.check([k])]
        raise UserError(
            f"process-group set-up: {what} within {timeout.total_seconds():.0f} s "
            f"(missing: {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}); "
            "see the log of the rank(s) named for why they did not start"
        ) from None


def _lead(store: dist.Store, world_size: int, timeout: timedelta) -> int:
    generation = store.add(GENERATION, 1)
    previous = int(store.get(CURRENT)) if store.check([CURRENT]) else None
    store.set(CURRENT, str(generation))
    if previous is not None:  # redirect whoever still waits in the previous generation
        for rank in range(1, world_size):
            hello = _hello(previous, rank)
            if store.check([hello]):
                store.set(_answer(previous, rank, store.get(hello).decode()), str(generation))
    hellos = [_hello(generation, rank) for rank in range(1, world_size)]
    if hellos:
        _wait(store, hellos, timeout, f"rank(s) of world size {world_size} did not join rank 0")
        nonces = store.multi_get(hellos)
        answers = [_answer(generation, rank, n.decode()) for rank, n in zip(range(1, world_size), nonces, strict=True)]
        store.multi_set(answers, [str(generation)] * len(answers))
    return generation


def _follow(store: dist.Store, rank: int, timeout: timedelta) -> int:
    nonce = uuid.uuid4().hex
    _wait(store, [CURRENT], timeout, "rank 0 did not start")
    current = int(store.get(CURRENT))
    while True:
        store.set(_hello(current, rank), nonce)
        now = int(store.get(CURRENT))
        if now != current:
            current = now
            continue
        answer = _answer(current, rank, nonce)
        _wait(store, [answer], timeout, f"rank 0 did not answer rank {rank}")
        told = int(store.get(answer))
        if told == current:
            return current
        current = told


def fresh_generation(store: dist.Store, rank: int, world_size: int, timeout: timedelta) -> int:
    """The generation of this round, the same on every rank and never used by an earlier round."""
    return _lead(store, world_size, timeout) if rank == 0 else _follow(store, rank, timeout)


def round_store(store: dist.Store, rank: int, world_size: int, timeout: timedelta) -> tuple[dist.Store, int]:
    """``store`` seen through this round's own namespace, and the round's generation."""
    generation = fresh_generation(store, rank, world_size, timeout)
    return dist.PrefixStore(namespace(generation), store), generation
