"""The round namespace of torchrun's shared store (trainer.rounds), on a real TCPStore.

Each rank runs in a thread with its own TCPStore client, as the workers of one round do.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import torch.distributed as dist

from trainer import rounds
from trainyard.cluster.processes import wait_for
from trainyard.contract.errors import UserError

TIMEOUT = timedelta(seconds=30)


@pytest.fixture
def server():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    yield store


def client(server) -> dist.TCPStore:
    return dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=TIMEOUT)


class Rank(threading.Thread):
    def __init__(self, server, rank: int, world_size: int) -> None:
        super().__init__(daemon=True)
        self.store, self.rank, self.world_size = client(server), rank, world_size
        self.generation: int | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.generation = rounds.fresh_generation(self.store, self.rank, self.world_size, TIMEOUT)
        except BaseException as exc:
            self.error = exc


def one_round(server, world_size: int, order: list[int] | None = None) -> list[int]:
    ranks = [Rank(server, r, world_size) for r in range(world_size)]
    for r in order or range(world_size):
        ranks[r].start()
    for t in ranks:
        t.join(timeout=60)
        assert not t.is_alive() and t.error is None, t.error
    return [t.generation for t in ranks]  # type: ignore[misc]


def test_every_round_gets_one_generation_no_earlier_round_used(server):
    seen = []
    for order in ([0, 1, 2], [2, 1, 0], [1, 0, 2]):
        generations = one_round(server, 3, order)
        assert len(set(generations)) == 1, generations
        seen.append(generations[0])
    assert seen == sorted(set(seen)), seen  # new each round, never reused


def test_a_rank_that_reads_the_previous_round_is_redirected(server):
    (first,) = set(one_round(server, 3))
    old_hello = server.get(f"{rounds.namespace(first)}/hello/1")
    # round 2: rank 1 starts before rank 0, so it reads the generation of round 1 and says hello there
    early = Rank(server, 1, 3)
    early.start()
    wait_for(lambda: server.get(f"{rounds.namespace(first)}/hello/1") != old_hello, 30, "rank 1's hello in round 1")
    assert early.generation is None  # waiting for an answer nobody alive can give but the next rank 0
    late = [Rank(server, r, 3) for r in (0, 2)]
    for t in late:
        t.start()
    for t in (early, *late):
        t.join(timeout=60)
        assert t.error is None, t.error
    assert {early.generation, *(t.generation for t in late)} == {first + 1}


def test_world_size_may_change_between_rounds(server):
    (a,) = set(one_round(server, 4))
    (b,) = set(one_round(server, 2))
    assert b > a


def test_a_rank_that_never_comes_is_a_clear_error(server):
    with pytest.raises(UserError, match=r"did not join rank 0 within 1 s \(missing: trainyard/pg/g1/hello/1\)"):
        rounds.fresh_generation(client(server), 0, 2, timedelta(seconds=1))
    with pytest.raises(UserError, match="rank 0 did not answer rank 1"):
        rounds.fresh_generation(client(server), 1, 2, timedelta(seconds=1))
