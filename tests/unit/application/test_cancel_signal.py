"""A call's cancel signal (`ToolContext.cancel_signal`) behaves as the threading.Event it stands for,
though it builds its event only when a tool first waits (docs/runs.md, "Stopping a running tool")."""

from __future__ import annotations

import threading

from dcaf_like.application.ports import CancelSignal


def test_a_signal_set_before_anyone_waits_is_seen_by_every_wait():
    signal = CancelSignal()
    assert not signal.is_set()
    signal.set()
    assert signal.is_set()
    assert signal.wait(0) is True
    assert signal.wait() is True


def test_a_wait_that_times_out_says_so_and_a_later_set_is_seen():
    signal = CancelSignal()
    assert signal.wait(0) is False  # its event exists from here on
    signal.set()
    assert signal.wait(0) is True


def test_a_set_from_another_thread_wakes_a_tool_waiting_on_it():
    signal = CancelSignal()
    woke: list[bool] = []
    waiting = threading.Thread(target=lambda: woke.append(signal.wait(30)))
    waiting.start()
    signal.set()
    waiting.join(30)
    assert woke == [True]


def test_many_waiters_and_one_set_all_wake():
    signal = CancelSignal()
    woke: list[bool] = []
    threads = [threading.Thread(target=lambda: woke.append(signal.wait(30))) for _ in range(8)]
    for thread in threads:
        thread.start()
    signal.set()
    for thread in threads:
        thread.join(30)
    assert woke == [True] * 8


def test_its_repr_says_whether_it_is_set():
    signal = CancelSignal()
    assert repr(signal) == "CancelSignal(set=False)"
    signal.set()
    assert repr(signal) == "CancelSignal(set=True)"
