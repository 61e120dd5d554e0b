"""The hot index's readers-writer lock (tierstore/storage/rwlock.py): readers share it,
a writer has it alone, and a waiting writer goes before new readers."""

from __future__ import annotations

import threading
import time

from tierstore.storage.rwlock import RWLock

WAIT = 10.0  # seconds: a bound on waits that must end, never reached when the code is right


def _started(target) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


def _blocked(t: threading.Thread, for_s: float = 0.2) -> bool:
    """Whether ``t`` is still running after ``for_s`` seconds (it waits on the lock)."""
    t.join(for_s)
    return t.is_alive()


def test_readers_share_the_lock_and_a_writer_waits_for_them():
    lock = RWLock()
    lock.acquire_read()
    with lock.read():  # a second reader while the first holds it
        assert lock.try_read()
        lock.release_read()
    wrote = threading.Event()

    def writer():
        with lock.write():
            wrote.set()

    t = _started(writer)
    assert _blocked(t) and not wrote.is_set()  # the first reader still holds it
    lock.release_read()
    assert wrote.wait(WAIT)
    t.join(WAIT)


def test_a_writer_excludes_readers_and_try_read_does_not_wait():
    lock = RWLock()
    entered = threading.Event()
    with lock.write():
        assert not lock.try_read()

        def reader():
            with lock.read():
                entered.set()

        t = _started(reader)
        assert _blocked(t) and not entered.is_set()
    assert entered.wait(WAIT)
    t.join(WAIT)
    assert lock.try_read()
    lock.release_read()


def test_a_waiting_writer_goes_before_new_readers():
    lock = RWLock()
    order: list[str] = []
    lock.acquire_read()

    def writer():
        with lock.write():
            order.append("writer")

    w = _started(writer)
    deadline = time.monotonic() + WAIT
    while lock._waiting_writers == 0 and time.monotonic() < deadline:  # the writer is queued
        time.sleep(0.001)
    assert lock._waiting_writers == 1
    assert not lock.try_read()  # a new reader may not pass a waiting writer

    def reader():
        lock.acquire_read()
        order.append("reader")
        lock.release_read()

    r = _started(reader)
    assert _blocked(r) and order == []
    lock.release_read()  # the first reader leaves: the writer, then the reader
    w.join(WAIT)
    r.join(WAIT)
    assert order == ["writer", "reader"]
