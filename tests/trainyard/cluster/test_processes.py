"""Telling a port something listens on from one an outbound connection happens to use."""

from __future__ import annotations

import socket

from trainyard.cluster.processes import EPHEMERAL_RANGE, LOWEST_PORT, free_port, listening, port_in_use


def test_a_listener_is_listening_until_it_closes() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    assert listening(port) and port_in_use(port)
    server.close()
    assert not listening(port)


def test_an_outbound_connections_source_port_is_not_a_listener() -> None:
    """What made a stopped cluster look alive: another process's connection whose ephemeral source
    port was the stopped daemon's port. It blocks a bind, but nothing listens there."""
    with socket.create_server(("127.0.0.1", 0)) as server, socket.socket() as client:
        client.bind(("127.0.0.1", free_port()))
        source = client.getsockname()[1]
        client.connect(server.getsockname())
        assert port_in_use(source)  # a bind there would fail
        assert not listening(source)


def test_a_free_port_is_below_the_range_outbound_connections_take() -> None:
    low = int(EPHEMERAL_RANGE.read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert all(LOWEST_PORT <= p < low for p in ports), ports
    for port in ports[:5]:
        with socket.create_server(("127.0.0.1", port)):  # bindable, as the caller will
            pass


def test_a_port_held_is_never_chosen(monkeypatch) -> None:
    """Every port below the range but one is taken: that one is chosen, or port 0's choice after
    the tries, never a held port."""
    from trainyard.cluster import processes

    with socket.create_server(("127.0.0.1", 0)) as held:
        taken = held.getsockname()[1]
        monkeypatch.setattr(processes.random.SystemRandom, "randrange", lambda self, a, b: taken)
        port = free_port()
    assert port != taken
