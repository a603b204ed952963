"""Which pages of a DynamoDB item a windowed read asks for, and the bounded memory a repository keeps of
them (``stores/_dynamodb_pages.py``; the reads and saves themselves run against moto in
``tests/integration/test_dynamodb_windowed_reads.py``)."""

from __future__ import annotations

from dcaf_like.stores._dynamodb_pages import PAGE, PageMemory, Pages, Remembered


def test_a_window_needs_the_pages_from_the_one_holding_its_start_to_the_last() -> None:
    pages = Pages.window(991, 330, 1000, 333)

    assert PAGE == 64
    assert pages == Pages(range(15, 16), range(5, 6))
    assert pages.attributes() == ["m15", "c5"]
    assert Pages.window(0, 0, 0, 0).attributes() == []


def test_pages_asked_for_cover_a_window_only_if_they_hold_all_it_needs() -> None:
    asked = Pages.window(991, 330, 1000, 333).and_next()

    assert asked.attributes() == ["m15", "m16", "c5", "c6"]
    assert asked.covers(Pages.window(1000, 333, 1030, 335))  # another worker added a page
    assert not asked.covers(Pages.window(900, 330, 1000, 333))  # starts before what was asked
    assert not asked.covers(Pages.window(1100, 333, 1100, 333))  # two pages on
    assert asked.covers(Pages(range(15, 16), range(6, 6)))  # no call needed


def test_the_memory_keeps_the_pages_of_the_conversations_used_last_within_its_budget() -> None:
    page = b"x" * 1000
    memory = PageMemory(budget=3 * (256 + 2000))
    for n in range(5):
        memory.put(f"c{n}", Remembered(1, Pages.window(0, 0, 10, 1), page, page))
        memory.get("c0")  # used again: kept

    assert len(memory) == 3
    assert memory.get("c0") is not None
    assert memory.get("c1") is None
    assert memory.get("c4") is not None
    memory.forget("c4")
    assert memory.get("c4") is None


def test_a_remembered_page_serves_only_the_version_it_was_stored_at() -> None:
    remembered = Remembered(7, Pages.window(70, 3, 100, 10), b"m1", b"c0")

    assert remembered.stored("m1", 7) == b"m1"
    assert remembered.stored("c0", 7) == b"c0"
    assert remembered.stored("m1", 8) is None
    assert remembered.stored("m0", 7) is None
