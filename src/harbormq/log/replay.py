"""The commit rule, written once: which effect each log record has on the
objects, replayed in LSN order. Restart redo (``recovery/restart.py``) and
media recovery (``recovery/recreate.py``) both drive it. Roll-forward of
restored stores, backup restore and standby replay will too. The pipeline's
set algebra (``pipeline/algebra.py``) computes the same, and a test holds the
two together.

The rule:

* A MSG_PUT, MSG_GET or MSG_EXPIRE flagged AUTO_COMMIT takes effect at its own
  LSN. One in a unit of work becomes a *pending* operation of that unit.
* A MSG_PUBLISH is a put on each of its targets (one message, each target's
  own seq and id), with the same rule: each target is a put of its own for ``Effects``
  (``target``, ``due``, ``opened``: a target whose queue is gone, damaged, of
  another incarnation or past the record in its store is left out alone, the
  others take the put). In a unit of work its targets are pending together
  and one COMPENSATION of the record undoes them all.
* A UOW_COMMIT takes effect at its LSN for every pending operation of its
  unit. Its payload may name units of work **joined** to it
  (``core.commit_nowait``). This record decides them too, whether or not
  their own COMMIT record follows (a crash can come between).
* A COMPENSATION undoes one pending operation. An undone put simply ends. An
  undone get leaves the message on its queue with the backout count the
  record carries; that count is an effect at the compensation's LSN.
* A UOW_BACKOUT ends the unit: whatever is still pending ends with no effect.
* A UOW_SHUNT (log shunting, written by a checkpoint) copies forward the
  records a long unit of work still needs: its pending puts and gets, and for
  a unit being backed out the gets already compensated with their
  compensations, with its state, owner and BEGIN LSN. For a unit the rule has
  read from its UOW_BEGIN (or from an earlier shunt) the copies are of records
  already read, and the shunt changes nothing but where the unit is needed
  from. For a unit it has not read whole (the reading started after its
  first record: restart redo from a restart point the shunt let move on), the
  copies of the records it did not read are fed to the rule as if they were
  those records, in their order and at their own LSNs, so the unit's pending
  operations are exactly what the original records would have made them (a
  compensation read before the shunt, of a get it had not read, is fed again
  with that get: read first, it had no operation to undo). A
  shunt cut into parts takes effect at its last part; one whose parts are not
  all read (a crash while it was written, or a reading that starts inside it)
  is ignored.
* Units of work still open at the end (in flight, in backout, prepared) are
  left in ``open`` for the caller (restart backs them out or keeps them in
  doubt).

An effect applies to an object only when ``Effects.due`` says so. That is how
a store whose recovery LSN is R takes only effects at or after R, and how an
image taken at B takes only effects at or after B. Everything that depends on
what the caller keeps (stores, locks, counts) is behind the ``Effects``
interface. The rule itself is pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from .records import (
    AUTO_COMMIT,
    Compensation,
    LogRecord,
    Message,
    Publication,
    RecordType,
    decode_json,
    decode_shunt,
    ref_key,
    target_msg_id,
)


@dataclass(eq=False)
class PendingOp:
    """A put or a get (or an expiry) waiting for its unit of work's outcome."""
    kind: str                 # "put" or "get"
    uow_id: int
    target: Any               # the object, as Effects.target gave it
    key: bytes                # the message's store key
    msg: Message | None       # put: the message; get: whatever Effects.opened found
    lsn: int
    prev_lsn: int
    #: a target of a MSG_PUBLISH: how many targets the record has (0: not one),
    #: and the publication's own message id (each target's is derived from it)
    fanout: int = 0
    publication_id: bytes = b""


@dataclass(eq=False)
class OpenUow:
    """A unit of work the records have begun and not yet ended."""
    id: int
    #: the first record a reading needs for it: its UOW_BEGIN, its latest shunt,
    #: or (read only in part) the first of its records read
    first_lsn: int
    last_lsn: int
    state: str = "active"     # active, prepared, backing_out
    owner: str = ""
    started_ns: int = 0
    #: pending operations by LSN, in log order (a compensation finds its op at
    #: once); a publication's targets by (LSN, index of the target)
    ops: dict[int | tuple[int, int], PendingOp] = field(default_factory=dict)
    #: its UOW_BEGIN's LSN, once read or told by a shunt (0: not known)
    begin_lsn: int = 0
    #: every record of it is known: its UOW_BEGIN was read, or a shunt
    whole: bool = False
    #: where the first record of it read lies (a shunt fills in what is before)
    read_from: int = 0
    #: its MSG_PUBLISH records read, LSN -> targets; their pending targets are
    #: ``ops[(lsn, i)]`` (a compensation of the record undoes them all)
    publications: dict[int, int] = field(default_factory=dict)


@dataclass(eq=False)
class _ShuntRead:
    """A shunt cut into parts, while its parts are read."""
    lsn: int                  # its first part's
    head: dict
    copies: list[LogRecord] = field(default_factory=list)
    next_part: int = 0


class Effects(Protocol):
    """What the caller of the rule keeps, and how an effect reaches it."""

    def target(self, rec: LogRecord) -> Any | None:
        """The object a message record is about, or None to ignore the record
        (another object, a deleted or damaged one, an older incarnation). For a
        target of a MSG_PUBLISH, ``rec`` is a MSG_PUT naming that target's
        object, at the publication's LSN, with no payload (the op has the message)."""

    def due(self, target: Any, lsn: int) -> bool:
        """Whether an effect at ``lsn`` applies to ``target``."""

    def seen_put(self, target: Any, msg: Message) -> None:
        """Every put of ``target`` read, whatever becomes of it (sequences)."""

    def opened(self, op: PendingOp, rec: LogRecord) -> bool:
        """An operation became pending (``rec`` is its record). A get may fill in
        ``op.msg``. Returning False drops the operation (its message is not there)."""

    def closed(self, op: PendingOp, applied: bool) -> None:
        """A pending operation ended; ``applied`` when its effect was applied
        (``put``/``delete``/``backed_out`` was called for it just before)."""

    def put(self, target: Any, msg: Message, lsn: int) -> None:
        """A committed put."""

    def delete(self, target: Any, key: bytes, lsn: int, op: PendingOp | None) -> None:
        """A committed get or expiry: ``op`` is its pending operation, None for an
        auto-committed one (whose message may be gone already)."""

    def backed_out(self, op: PendingOp, backout_count: int, lsn: int) -> None:
        """A get undone by a compensation: the message stays, with this count."""


class CommitRule:
    def __init__(self, effects: Effects):
        self.effects = effects
        #: units of work begun and not ended, by id
        self.open: dict[int, OpenUow] = {}
        #: units committed by another one's COMMIT whose own COMMIT record has
        #: not been read (restart writes it)
        self.joined_unrecorded: dict[int, OpenUow] = {}
        T = RecordType
        #: record type -> what the rule does with it (``feed``; a loop over many
        #: records may look its handler up itself)
        self.handlers = self._handlers = {
            T.MSG_PUT: self._put, T.MSG_GET: self._get, T.MSG_EXPIRE: self._get,
            T.MSG_PUBLISH: self._publish,
            T.UOW_BEGIN: self._begin, T.UOW_PREPARE: self._prepare,
            T.UOW_COMMIT: self._commit, T.COMPENSATION: self._compensation,
            T.UOW_BACKOUT: self._backout, T.UOW_SHUNT: self._shunt,
        }
        #: the parts of a shunt read so far, by unit
        self._shunt_parts: dict[int, _ShuntRead] = {}

    def feed(self, rec: LogRecord) -> bool:
        """Apply one record; False when the rule has nothing to do with its type
        (object definitions, images, checkpoints: the caller's business)."""
        handler = self._handlers.get(rec.type)
        if handler is None:
            return False
        handler(rec)
        return True

    def _uow(self, rec: LogRecord) -> OpenUow:
        uow = self.open.get(rec.uow_id)
        if uow is None:
            uow = self.open[rec.uow_id] = OpenUow(rec.uow_id, rec.lsn, rec.lsn,
                                                  read_from=rec.lsn)
        return uow

    def _put(self, rec: LogRecord) -> None:
        fx = self.effects
        target = fx.target(rec)
        if target is None:
            return
        msg = Message.decode(rec.payload)
        fx.seen_put(target, msg)
        if rec.flags & AUTO_COMMIT:
            if fx.due(target, rec.lsn):
                fx.put(target, msg, rec.lsn)
            return
        uow = self._uow(rec)
        uow.last_lsn = rec.lsn
        op = PendingOp("put", rec.uow_id, target, msg.key, msg, rec.lsn, rec.prev_lsn)
        if fx.opened(op, rec):
            uow.ops[op.lsn] = op

    def _publish(self, rec: LogRecord) -> None:
        fx = self.effects
        pub = Publication.decode(rec.payload)
        auto = rec.flags & AUTO_COMMIT
        count = len(pub.targets)
        msg = uow = None
        for i, t in enumerate(pub.targets):
            target = fx.target(LogRecord(RecordType.MSG_PUT, rec.uow_id, rec.prev_lsn,
                                         t.object_id, t.name, b"", rec.flags, rec.lsn,
                                         rec.timestamp_ns))
            if target is None:
                continue
            if msg is None:
                msg = pub.decode_message()      # once, for every target
            m = msg.for_target(t.seq, target_msg_id(msg.msg_id, i))
            fx.seen_put(target, m)
            if auto:
                if fx.due(target, rec.lsn):
                    fx.put(target, m, rec.lsn)
                continue
            if uow is None:
                uow = self._uow(rec)
                uow.last_lsn = rec.lsn
                uow.publications[rec.lsn] = count
            op = PendingOp("put", rec.uow_id, target, m.key, m, rec.lsn, rec.prev_lsn, count,
                           msg.msg_id)
            if fx.opened(op, rec):
                uow.ops[(rec.lsn, i)] = op

    def _get(self, rec: LogRecord) -> None:
        fx = self.effects
        target = fx.target(rec)
        if target is None:
            return
        key = ref_key(rec.payload)
        if rec.flags & AUTO_COMMIT:
            if fx.due(target, rec.lsn):
                fx.delete(target, key, rec.lsn, None)
            return
        uow = self._uow(rec)
        uow.last_lsn = rec.lsn
        op = PendingOp("get", rec.uow_id, target, key, None, rec.lsn, rec.prev_lsn)
        if fx.opened(op, rec):
            uow.ops[op.lsn] = op

    def _begin(self, rec: LogRecord) -> None:
        uow = self._uow(rec)
        uow.owner = decode_json(rec.payload).get("owner", "")
        uow.started_ns = rec.timestamp_ns
        uow.begin_lsn = rec.lsn
        uow.whole = True

    def _prepare(self, rec: LogRecord) -> None:
        uow = self._uow(rec)
        uow.state = "prepared"
        uow.last_lsn = rec.lsn

    def _commit(self, rec: LogRecord) -> None:
        self.joined_unrecorded.pop(rec.uow_id, None)
        if rec.payload:
            for joined_id in decode_json(rec.payload).get("joined", ()):
                joined = self.open.get(joined_id)
                if joined is not None:
                    self.joined_unrecorded[joined_id] = joined
                    self._decide(joined_id, rec.lsn)
        self._decide(rec.uow_id, rec.lsn)

    def _decide(self, uow_id: int, commit_lsn: int) -> None:
        self._shunt_parts.pop(uow_id, None)
        uow = self.open.pop(uow_id, None)
        if uow is None:
            return
        fx = self.effects
        for op in uow.ops.values():
            applied = bool(op.lsn) and fx.due(op.target, commit_lsn)
            if applied:
                if op.kind == "put":
                    fx.put(op.target, op.msg, commit_lsn)
                else:
                    fx.delete(op.target, op.key, commit_lsn, op)
            fx.closed(op, applied)

    def _compensation(self, rec: LogRecord) -> None:
        uow = self._uow(rec)
        uow.state = "backing_out"
        uow.last_lsn = rec.lsn
        comp = Compensation.decode(rec.payload)
        if comp.undone_type == RecordType.MSG_PUBLISH:
            # the whole publication: every target still pending ends
            count = uow.publications.pop(comp.undone_lsn, 0)
            for i in range(count):
                op = uow.ops.pop((comp.undone_lsn, i), None)
                if op is not None:
                    self.effects.closed(op, False)
            return
        op = uow.ops.pop(comp.undone_lsn, None)
        if op is None:
            return
        fx = self.effects
        applied = op.kind == "get" and fx.due(op.target, rec.lsn)
        if applied:
            fx.backed_out(op, comp.backout_count, rec.lsn)
        fx.closed(op, applied)

    def _shunt(self, rec: LogRecord) -> None:
        part = decode_shunt(rec.payload, rec.uow_id)
        got = self._shunt_parts.pop(rec.uow_id, None)
        if part.part == 0:
            got = _ShuntRead(rec.lsn, part.head)
        elif got is None or got.next_part != part.part:
            return      # a shunt whose earlier parts were not read: ignored
        got.copies += part.copies
        got.next_part += 1
        if got.next_part < part.parts:
            self._shunt_parts[rec.uow_id] = got
            return
        uow = self.open.get(rec.uow_id)
        if uow is None:
            uow = self.open[rec.uow_id] = OpenUow(rec.uow_id, got.lsn, rec.lsn,
                                                  read_from=rec.lsn)
        if not uow.whole:
            # the records before the first one read, replayed from their copies;
            # and the compensation of such a record, read already but then of an
            # operation the rule did not know (it had no effect): so a get comes
            # back with its compensation, never pending to be backed out again
            last = uow.last_lsn
            for copy in got.copies:
                if copy.lsn < uow.read_from or (
                        copy.type == RecordType.COMPENSATION and
                        Compensation.decode(copy.payload).undone_lsn < uow.read_from):
                    self._handlers[copy.type](copy)
            head = got.head
            uow.last_lsn = last
            uow.state = head.get("state", uow.state)
            uow.owner = head.get("owner", uow.owner)
            uow.started_ns = head.get("started_ns", uow.started_ns)
            uow.begin_lsn = head.get("begin_lsn", uow.begin_lsn)
            uow.whole = True
        uow.first_lsn = got.lsn
        uow.last_lsn = max(uow.last_lsn, rec.lsn)

    def _backout(self, rec: LogRecord) -> None:
        self._shunt_parts.pop(rec.uow_id, None)
        uow = self.open.pop(rec.uow_id, None)
        if uow is not None:      # its operations were compensated already: release the rest
            for op in uow.ops.values():
                self.effects.closed(op, False)


# --- records without effect --------------------------------------------------------

_PUT, _GET, _EXPIRE = RecordType.MSG_PUT, RecordType.MSG_GET, RecordType.MSG_EXPIRE
_PUBLISH = RecordType.MSG_PUBLISH
_BEGIN, _COMMIT = RecordType.UOW_BEGIN, RecordType.UOW_COMMIT
#: records that make a unit of work more than "begun, then committed"
_NOT_PLAIN = frozenset((RecordType.UOW_PREPARE, RecordType.UOW_BACKOUT,
                        RecordType.COMPENSATION, RecordType.UOW_SHUNT))
_OBJECT_RECORDS = frozenset((RecordType.OBJECT_CREATE, RecordType.OBJECT_ALTER,
                             RecordType.OBJECT_DELETE))


def without_effect(records: list[LogRecord], open_uows, due_from: dict[int, int]
                   ) -> set[int]:
    """The LSNs of the records in ``records`` (a stretch of the log, in order)
    that the rule may skip, because together they change nothing: a message
    put and got again within the stretch. Restart redo uses it: a queue that
    drained as fast as it filled leaves most of its log without effect, and
    skipping a pair costs no message decode, no pending operations and no
    store work.

    A put and a get of the same message (object id, seq, priority: an object
    id names one incarnation of one object) are skipped together only when
    each is the only record of that kind for the message in the stretch, the
    get comes after the put took effect, and each is either auto-committed or
    in a *plain* unit of work: begun and committed in the stretch (not open in
    ``open_uows`` when it starts, never prepared, backed out, compensated,
    shunted, joined to or joining another). The put's effect must be due on
    its object: at or above ``due_from[object_id]`` (the store's recovery LSN;
    an object not in it, or with an object record in the stretch, is left
    alone). Such a put is applied and then deleted by the rule, with nothing
    in between that could see it (no other record names the message); without
    both, the objects end the same. A plain unit of work all of whose puts and
    gets are skipped is skipped whole (its BEGIN and COMMIT: the rule would
    open it and decide nothing). A MSG_PUBLISH is never skipped, nor the
    gets of its messages, nor its unit of work (skipping a publication for
    some targets and not others is not worth its complexity).

    The caller must give the rule every record of the stretch that is not
    skipped before anything writes the objects' state at an LSN inside it: a
    pair spans the stretch, and the state between its two halves is not the
    log's (restart flushes its stores only between stretches). A skipped put
    still uses up its sequence number: the caller sees to that."""
    uows: dict[int, list] = {}      # uow id -> [plain?, commit LSN, BEGIN LSN, ops, skipped]
    puts: dict[tuple, LogRecord] = {}
    gets: dict[tuple, LogRecord] = {}
    twice = set()                    # messages with two puts or two gets here
    objects_changed = set()
    for rec in records:
        t = rec.type
        if t is _PUT or t is _GET or t is _EXPIRE:
            ident = (rec.object_id, rec.payload[:9])     # seq u64, priority u8
            seen = puts if t is _PUT else gets
            if ident in seen:
                twice.add(ident)
            else:
                seen[ident] = rec
            if not rec.flags & AUTO_COMMIT:
                u = uows.get(rec.uow_id)
                if u is None:        # an op before its BEGIN: begun before the stretch
                    u = uows[rec.uow_id] = [False, 0, 0, 0, 0]
                u[3] += 1
        elif t is _PUBLISH:
            # never skipped (its gets find no put here): an op of its unit that
            # keeps the unit from being skipped whole
            if not rec.flags & AUTO_COMMIT:
                uows.setdefault(rec.uow_id, [False, 0, 0, 0, 0])[3] += 1
        elif t is _BEGIN:
            if rec.uow_id in uows:
                uows[rec.uow_id][0] = False    # (a second BEGIN: nothing is assumed)
            else:
                uows[rec.uow_id] = [rec.uow_id not in open_uows, 0, rec.lsn, 0, 0]
        elif t is _COMMIT:
            u = uows.get(rec.uow_id)
            if u is None:
                u = uows[rec.uow_id] = [False, 0, 0, 0, 0]
            u[1] = rec.lsn
            if rec.payload:                    # it decides joined units too
                u[0] = False
                for joined in decode_json(rec.payload).get("joined", ()):
                    uows.setdefault(joined, [False, 0, 0, 0, 0])[0] = False
        elif t in _NOT_PLAIN:
            uows.setdefault(rec.uow_id, [False, 0, 0, 0, 0])[0] = False
        elif t in _OBJECT_RECORDS:
            objects_changed.add(rec.object_id)

    skip: set[int] = set()
    for ident, get in gets.items():
        put = puts.get(ident)
        if put is None or ident in twice or ident[0] in objects_changed:
            continue
        if put.flags & AUTO_COMMIT:
            put_uow, put_at = None, put.lsn
        else:
            put_uow = uows[put.uow_id]
            if not (put_uow[0] and put_uow[1]):
                continue
            put_at = put_uow[1]
        if get.lsn <= put_at or put_at < due_from.get(ident[0], put_at + 1):
            continue
        get_uow = None
        if not get.flags & AUTO_COMMIT:
            get_uow = uows[get.uow_id]
            if not (get_uow[0] and get_uow[1]):
                continue
        skip.add(put.lsn)
        skip.add(get.lsn)
        if put_uow is not None:
            put_uow[4] += 1
        if get_uow is not None:
            get_uow[4] += 1
    for plain, commit_lsn, begin_lsn, ops, skipped in uows.values():
        if plain and commit_lsn and ops == skipped:
            skip.add(begin_lsn)
            skip.add(commit_lsn)
    return skip
