"""The memory layer of a queue after a flush: ``end_flush`` takes the flushed
keys out of the delivery-order index, but for those changed again since.
It either discards key by key or, when most of the index was flushed, keeps
the rest in a new index; both ways must leave the same keys, in order.
A selector's get goes on from where its scan stopped: it must take what a
scan of the whole queue would."""

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


# -- where a selector's scan goes on from (issue 31) ---------------------------------------------

class _NoStore(_EmptyStore):
    """A store that holds nothing yet: every message is in the memory layer."""

    def last_key(self):
        return None

    def get(self, key):
        return None

    def get_many(self, keys):
        return {}


operations = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 9), st.sampled_from(["red", "blue", "green"])),
    st.tuples(st.just("get"), st.integers(0, 1)),
    st.tuples(st.just("commit"), st.integers(0, 50)),
    st.tuples(st.just("backout"), st.integers(0, 50))), max_size=80)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_a_selector_scan_from_where_it_stopped_finds_what_a_full_scan_finds(ops):
    """Puts of any priority, gets by two selectors, commits and backouts in any
    order: the get that goes on from where its selector stopped takes what a
    scan of the whole queue would."""
    from harbormq.core.selectors import compile_selector
    from harbormq.log.records import Message
    q = LocalQueue({"name": "Q", "object_id": 7, "attrs": {}}, _NoStore())
    selectors = [compile_selector("color = 'red'"), compile_selector("color <> 'red'")]
    present: dict[bytes, Message] = {}
    seq = 0
    for op in ops:
        if op[0] == "put":
            seq += 1
            msg = Message(priority=op[1], seq=seq, properties={"color": op[2]})
            present[msg.key] = msg
            q.commit_put(msg, 0)
        elif op[0] == "get":
            sel = selectors[op[1]]
            expected = next((k for k in sorted(present)
                             if k not in q.locked and sel.matches(present[k])), None)
            key, msg, expired = q.first_available(sel, 0)
            assert key == expected and not expired
            if key is not None:
                q.locked[key] = 1
        elif q.locked:
            key = sorted(q.locked)[op[1] % len(q.locked)]
            if op[0] == "commit":
                q.commit_delete(key, 0)
                del present[key]
            else:
                q.unlocked(key)
