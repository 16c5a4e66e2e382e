"""The connection gate's order of closing, and when memory is given back (no sockets: the
server tests run the same code over real connections)."""

from __future__ import annotations

from webhook.http_guard import ConnectionGate
from webhook.memory import Trimmer


class Transport:
    def __init__(self, name: str) -> None:
        self.name, self.aborted = name, False

    def abort(self) -> None:
        self.aborted = True


def gate_with(limit: int):
    closed: list[str] = []
    return ConnectionGate(limit, closed.append), closed


def test_a_new_connection_closes_the_oldest_that_never_completed_a_request():
    gate, closed = gate_with(3)
    t = {k: Transport(k) for k in "abcd"}
    for k in "abc":
        assert gate.admit(ord(k), t[k])
    gate.working(ord("a"))
    gate.idle(ord("a"))  # a completed a request: it is kept, and closed after the fresh ones
    assert gate.admit(ord("d"), t["d"])
    assert t["b"].aborted and not t["a"].aborted and closed == ["evicted_fresh"]
    assert len(gate) == 3


def test_then_the_connection_idle_longest_and_never_one_being_answered():
    gate, closed = gate_with(2)
    a, b, c, d = (Transport(x) for x in "abcd")
    gate.admit(1, a)
    gate.admit(2, b)
    for key in (1, 2):
        gate.working(key)
        gate.idle(key)
    gate.working(2)  # b is being answered
    assert gate.admit(3, c) and a.aborted and not b.aborted and closed == ["evicted_idle"]
    gate.working(3)  # now both are busy: the next one is refused, nothing is closed
    assert not gate.admit(4, d) and closed == ["evicted_idle", "refused"] and not d.aborted
    gate.release(2)
    assert gate.admit(4, d) and len(gate) == 2


def test_released_connections_leave_no_trace():
    gate, _ = gate_with(10)
    for key in range(10):
        gate.admit(key, Transport(str(key)))
        gate.working(key)
        gate.idle(key)
        gate.release(key)
    assert len(gate) == 0 and not gate.fresh and not gate.kept and not gate.busy


def test_memory_is_given_back_after_the_connections_fall_well_below_their_peak():
    now = [0.0]
    trimmer = Trimmer(drop=64, every=5.0, clock=lambda: now[0])
    assert not trimmer.tick(1000)  # a burst: nothing to give back yet
    now[0] = 6.0
    assert not trimmer.tick(990)  # a small dip
    assert trimmer.tick(900)  # 100 fewer than the peak, 6 s since the last trim
    now[0] = 7.0
    assert not trimmer.tick(0)  # within 5 s of the last trim
    now[0] = 12.0
    assert trimmer.tick(0) and trimmer.trims == 2
    now[0] = 20.0
    assert not trimmer.tick(0)  # nothing fell since
