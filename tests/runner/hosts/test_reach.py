"""Reaching a Ray head, bounded (runner/hosts/reach.py), against real sockets of this machine."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from runner.hosts.reach import ConnectError, HeadWatch, check_reachable, parse_address


@pytest.mark.parametrize(
    "address, expected",
    [
        ("127.0.0.1:6379", ("127.0.0.1", 6379)),
        ("gx10.lab:10001", ("gx10.lab", 10001)),
        ("[::1]:6379", ("::1", 6379)),
    ],
)
def test_parse_address(address, expected):
    assert parse_address(address) == expected


@pytest.mark.parametrize(
    "address", ["127.0.0.1:notaport", "127.0.0.1", ":6379", "127.0.0.1:0", "127.0.0.1:70000", "ray://127.0.0.1:10001x"]
)
def test_a_bad_address_is_a_connect_error_naming_it(address):
    with pytest.raises(ConnectError, match="expected HOST:PORT") as info:
        parse_address(address)
    assert repr(address) in str(info.value)


def test_a_name_that_does_not_resolve_says_so():
    with pytest.raises(ConnectError, match="cannot resolve 'no-such-host.invalid'"):
        check_reachable("no-such-host.invalid:6379", 5.0)


def test_a_silent_listener_is_given_up_within_the_bound():
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        t0 = time.monotonic()
        with pytest.raises(ConnectError, match="no Ray head answered within 3 s"):
            check_reachable(f"127.0.0.1:{silent.getsockname()[1]}", 3.0)
    assert time.monotonic() - t0 < 3.0 + 2.0


def test_the_head_watch_calls_back_once_the_port_stops_answering():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    lost: list[str] = []
    called = threading.Event()
    watch = HeadWatch(
        f"127.0.0.1:{server.getsockname()[1]}",
        lambda why: (lost.append(why), called.set()),
        lost_after_s=1.0,
        every_s=0.2,
    )
    watch.start()
    time.sleep(1.5)
    assert lost == []  # answering: never lost, however long
    server.close()
    t0 = time.monotonic()
    assert called.wait(10)
    assert 0.8 <= time.monotonic() - t0 < 5 and len(lost) == 1 and "Ray head lost" in lost[0]
    watch.join(5)
    assert not watch.is_alive()
