"""The memory layer of a queue after a flush: ``end_flush`` takes the flushed
keys out of the delivery-order index, but for those changed again since.
It either discards key by key or, when most of the index was flushed, keeps
the rest in a new index; both ways must leave the same keys, in order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harbormq.core.queue import LocalQueue


class _EmptyStore:
    """What a LocalQueue reads of its store when it is made."""
    next_seq = 1

    def count(self) -> int:
        return 0


def _queue() -> LocalQueue:
    return LocalQueue({"name": "Q", "object_id": 7, "attrs": {}}, _EmptyStore())


def _key(n: int) -> bytes:
    return n.to_bytes(4, "big")


@settings(max_examples=300, deadline=None)
@given(mem=st.sets(st.integers(0, 400)), flushed=st.sets(st.integers(0, 400)),
       dirty=st.sets(st.integers(0, 400)))
def test_end_flush_keeps_exactly_the_keys_not_flushed_or_changed_since(mem, flushed, dirty):
    q = _queue()
    q._mem_keys.update(_key(n) for n in mem)
    q.flushing = {_key(n): None for n in flushed}
    q.dirty = {_key(n): None for n in dirty}
    q.end_flush()
    expected = sorted(_key(n) for n in mem if n not in flushed or n in dirty)
    assert list(q._mem_keys) == expected
    assert q.flushing == {} and q.flushing_lsn is None


def test_both_ways_of_ending_a_flush_are_taken():
    """A small flush against a big index discards key by key (the index is the
    same object after); a flush of most of the index builds a new one."""
    q = _queue()
    q._mem_keys.update(_key(n) for n in range(100))
    index = q._mem_keys
    q.flushing = {_key(n): None for n in range(10)}
    q.end_flush()
    assert q._mem_keys is index and list(index) == [_key(n) for n in range(10, 100)]
    q.flushing = {_key(n): None for n in range(10, 90)}
    q.dirty = {_key(50): None}
    q.end_flush()
    assert q._mem_keys is not index
    assert list(q._mem_keys) == [_key(50)] + [_key(n) for n in range(90, 100)]
