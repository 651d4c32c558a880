"""QSGDISP(COPY): a member's copies of the group's QSGDISP(GROUP) definitions
(docs/qsg.md, "Group objects and their copies").

A group object is a row of ``hmq_definitions`` (``group.put_definition``);
each member keeps a copy of it in its own catalog, logged as any definition
is (OBJECT_CREATE, OBJECT_ALTER, OBJECT_DELETE), so a copy survives the
member's restart, its backups and its standby like any local object. A copy
is an ordinary definition with two keys more: ``qsgdisp`` ``"COPY"`` and
``group_version``, the version of the group object it was made from.

``sync`` brings the copies in line with the group: missing ones made,
those behind the group's version refreshed, those whose group object is
gone deleted. A member runs it at start (after restart recovery) and when
a definition's change is announced (NOTIFY ``hmq_definitions``). As in MQ,
a copy that cannot be made or changed (an object of this member's own with
that name, a local copy queue that holds messages and would be deleted) is
left as it is, said in the operator log, and the others go on.

The copy is written with the core's own steps (its record, the catalog,
the queue's store, the force); the attributes are checked with the rules
of ``core/objects.py`` before anything is written. A topic object's copy
joins the running topic tree (``core.pubsub``, started before the group's
service), as a topic object defined on the member does. Not here: the SQL
(``group.py``), the MQSC (``admin/groupdisp_commands.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.objects import QLOCAL_DEFAULTS, check_name, object_node, validate
from ..errors import HarbormqError, InvalidAttribute, ObjectExists, ObjectInUse
from ..log.records import RecordType, encode_json

COPY = "COPY"
#: the object types that have group objects and copies here
COPY_TYPES = ("QLOCAL", "QREMOTE", "QALIAS", "QMODEL", "PROCESS", "NAMELIST", "CHANNEL",
              "TOPIC")
#: the types in the queues' one namespace
QUEUE_TYPES = ("QLOCAL", "QREMOTE", "QALIAS", "QMODEL")


def catalog_key(core, objtype: str, name: str) -> str:
    if objtype == "QLOCAL":
        return name
    return core.DEFINITION_TYPES[objtype][1](name)


def local_object(core, objtype: str, name: str) -> dict | None:
    """This member's definition of ``objtype`` ``name`` (its own or a copy);
    for a queue type, any queue of that name."""
    d = core.objects.get(catalog_key(core, objtype, name))
    if d is None:
        return None
    if objtype in QUEUE_TYPES and d["type"] in QUEUE_TYPES:
        return d
    return d if d["type"] == objtype else None


def is_copy(d: dict | None) -> bool:
    return d is not None and d.get("qsgdisp") == COPY


def full_attrs(core, objtype: str, name: str, attrs: dict,
               base: dict | None = None) -> dict:
    """The complete, checked attributes of a definition: ``base`` (or the
    type's defaults) with ``attrs`` over it. Raises InvalidAttribute naming the
    bad one; nothing is written."""
    check_name(name, objtype.lower())
    if objtype not in COPY_TYPES:
        raise InvalidAttribute(f"QSGDISP(GROUP) is not offered for {objtype} here: "
                           f"{', '.join(COPY_TYPES)}")
    if objtype == "QLOCAL":
        out = dict(base or QLOCAL_DEFAULTS)
        out.update(validate(attrs, QLOCAL_DEFAULTS, f"queue {name}"))
        return out
    out = dict(base or core.DEFINITION_TYPES[objtype][0])
    out.update(core._validate_definition(objtype, name, attrs))
    if objtype == "TOPIC" and not out["TOPICSTR"]:
        raise InvalidAttribute(f"topic {name} needs TOPICSTR, the node of the topic tree it "
                               "stands for")
    return out


def _topics(core):
    """publish/subscribe's topic tree, once it runs (``core.pubsub``): a topic
    object's copy joins it as a topic object defined there does."""
    ps = getattr(core, "pubsub", None)
    return ps.topics if ps is not None else None


def check_can_copy(core, objtype: str, name: str, full: dict | None = None) -> None:
    """This member can hold a copy of ``objtype`` ``name`` (attributes ``full``):
    no object of its own (QSGDISP(QMGR)) has the name, nor a shared queue, nor
    (a topic) another topic object the topic string; ObjectExists if not."""
    d = local_object(core, objtype, name)
    if d is not None and not is_copy(d):
        raise ObjectExists(f"{d['type']}({name}) is an object of queue manager {core.name} "
                           "(QSGDISP(QMGR)): a copy of a group object of that name cannot be "
                           "made here (MQRC 2100 OBJECT_ALREADY_EXISTS)", queue=name)
    if d is not None and d["type"] != objtype:
        raise ObjectExists(f"{name} is a copy of a group {d['type']}, not a {objtype} "
                           "(MQRC 2100 OBJECT_ALREADY_EXISTS)", queue=name)
    if objtype in QUEUE_TYPES and name in getattr(core, "shared_queues", {}):
        raise ObjectExists(f"{name} is a shared queue of the group (MQRC 2100 "
                           "OBJECT_ALREADY_EXISTS)", queue=name)
    topics = _topics(core) if objtype == "TOPIC" and full is not None else None
    if topics is not None:
        other = topics.by_topic.get(object_node(full["TOPICSTR"]))
        if other is not None and other["name"] != name:
            raise ObjectExists(f"topic string '{full['TOPICSTR']}' already has topic object "
                               f"{other['name']} on {core.name} (MQRC 2100)", queue=name)


async def write_copy(core, objtype: str, name: str, attrs: dict, version: int, *,
                     at_start: bool = False) -> str:
    """Make or refresh this member's copy of a group object: ``"made"``,
    ``"refreshed"`` or ``"current"``. A copy of the group's version is left as
    it is (changed by ALTER ... QSGDISP(COPY), perhaps) but at start, when it
    is made the group's again, as MQ does. Logged and forced before it returns."""
    core.check_running()
    full = full_attrs(core, objtype, name, attrs)
    check_can_copy(core, objtype, name, full)
    key = catalog_key(core, objtype, name)
    existing = core.objects.get(key)
    topics = _topics(core) if objtype == "TOPIC" else None
    if existing is not None:
        if existing.get("group_version") == version and (
                not at_start or existing["attrs"] == full):
            return "current"
        definition = dict(existing, attrs=full, group_version=version)
        if objtype == "QLOCAL":
            q = core.queue(name)
            old_index = q.index_type
            lsn = core.append_record(RecordType.OBJECT_ALTER, obj=q,
                                     payload=encode_json(definition))
            core.set_definition(key, definition, lsn)
            q.definition = definition
            q.room_check()
            if full["INDXTYPE"] != old_index:
                await core.flush_all()
                q.store.rebuild_index(full["INDXTYPE"])
        else:
            lsn = core.append_record(RecordType.OBJECT_ALTER, object_id=existing["object_id"],
                                     name=key, payload=encode_json(definition))
            core.set_definition(key, definition, lsn)
        await core.log.force()
        if topics is not None:
            topics.drop(existing["attrs"]["TOPICSTR"])
            topics.set(definition)
        core.notify_definitions(objtype, name)
        return "refreshed"
    oid = core.next_object_id
    core.next_object_id += 1
    definition = {"type": objtype, "name": name, "object_id": oid, "attrs": full,
                  "qsgdisp": COPY, "group_version": version}
    lsn = core.append_record(RecordType.OBJECT_CREATE, object_id=oid, name=key,
                             payload=encode_json(definition))
    definition["create_lsn"] = lsn
    core.set_definition(key, definition, lsn)
    if objtype == "QLOCAL":
        q = core.open_queue_store(definition)
        if full["INDXTYPE"] != "NONE":
            q.store.rebuild_index(full["INDXTYPE"])
    await core.log.force()
    if topics is not None:
        topics.set(definition)
    core.notify_definitions(objtype, name)
    return "made"


async def delete_copy(core, objtype: str, name: str) -> None:
    """Delete this member's copy; a copy queue that holds messages is kept
    (MQ's DELETE ... NOPURGE QSGDISP(COPY)): ObjectInUse, MQRC 2055."""
    d = local_object(core, objtype, name)
    if not is_copy(d):
        return
    if d["type"] == "QLOCAL":
        await core.delete_queue(name, purge=False)
    elif d["type"] == "TOPIC" and getattr(core, "pubsub", None) is not None:
        await core.pubsub.delete_topic(name)     # out of the running tree too
    else:
        channels = getattr(core, "channels", None)
        if d["type"] == "CHANNEL" and channels is not None:
            channels.check_deletable("CHANNEL", name)
        await core.delete_object(d["type"], name)


@dataclass
class SyncReport:
    made: list[str] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    #: "QLOCAL(X): why" for each copy left as it was
    failed: list[str] = field(default_factory=list)


async def sync(core, group_definitions: list[dict], *, at_start: bool = False) -> SyncReport:
    """Bring this member's copies in line with the group's QSGDISP(GROUP)
    definitions (``group.definitions(conn, "GROUP")``): copies behind the
    group's version refreshed (``at_start``: every copy that differs). A copy
    that cannot be made, changed or deleted is reported, in the operator log
    too."""
    report = SyncReport()
    wanted = {(d["type"], d["name"]): d for d in group_definitions if d["type"] in COPY_TYPES}
    for (objtype, name), d in sorted(wanted.items()):
        what = f"{objtype}({name})"
        try:
            done = await write_copy(core, objtype, name, d["attrs"], d["version"],
                                    at_start=at_start)
        except HarbormqError as e:
            report.failed.append(f"{what}: {e.message}")
            continue
        if done == "made":
            report.made.append(what)
        elif done == "refreshed":
            report.refreshed.append(what)
    for d in sorted(list(core.objects.values()), key=lambda d: (d["type"], d["name"])):
        if not is_copy(d) or (d["type"], d["name"]) in wanted:
            continue
        what = f"{d['type']}({d['name']})"
        try:
            await delete_copy(core, d["type"], d["name"])
            report.deleted.append(what)
        except (ObjectInUse, HarbormqError) as e:
            report.failed.append(f"{what}: {e.message}")
    if report.made or report.refreshed or report.deleted:
        core.oplog.emit("HMQ5340I", f"copies of group objects on {core.name}: "
                        f"{len(report.made)} made, {len(report.refreshed)} refreshed, "
                        f"{len(report.deleted)} deleted"
                        + (f" ({', '.join(report.made + report.refreshed + report.deleted)})"))
    for text in report.failed:
        core.oplog.emit("HMQ5341W", f"copy of group object {text}; the copy is left as it "
                        "is (DISPLAY ... QSGDISP(ALL) shows both)")
    return report
