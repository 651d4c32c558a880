"""Plan, then apply: what a media recovery needs, computed before anything is
changed (litestream's restore plan). ``harbormq recreate --dry-run`` prints
the plan and stops there; a recreate computes the same plan first and refuses
to start while anything in it is missing. Backup restore and roll-forward
will plan the same way.

``recreate_plan`` is a pure function of facts read beforehand: the object's
media point, the extents of the log (number, LSN range, present or not) and
the LSN the replay runs to.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..log.records import extent_file_name


@dataclass(frozen=True)
class ExtentFact:
    number: int
    first_lsn: int
    end_lsn: int | None          # None: the extent being written
    present: bool


@dataclass(frozen=True)
class RecreatePlan:
    object: str
    #: the image the store is rebuilt from (its MEDIA_IMAGE_BEGIN, or the
    #: object's create record, which is its first image)
    image_lsn: int
    #: where the replay starts reading (earlier than the image when a unit of
    #: work in flight at the image had touched the object)
    replay_from: int
    to_lsn: int
    #: the extents the replay reads, in log order
    extents: tuple[str, ...]
    #: of those, the ones not on disk (the recreate cannot run: HMQ6767E)
    missing: tuple[str, ...]
    #: the replay starts before the oldest extent the control file lists
    before_log: bool

    @property
    def runnable(self) -> bool:
        return not self.missing and not self.before_log

    def as_dict(self) -> dict:
        return asdict(self) | {"runnable": self.runnable}

    def describe(self) -> str:
        head = (f"{self.object}: image at LSN {self.image_lsn}, replay LSN {self.replay_from} "
                f"to {self.to_lsn}, reading {', '.join(self.extents) or 'no extent'}")
        if self.before_log:
            return head + f"; NOT RUNNABLE: LSN {self.replay_from} is older than the log"
        if self.missing:
            return head + f"; NOT RUNNABLE: missing {', '.join(self.missing)}"
        return head


def recreate_plan(name: str, point: dict, extents: list[ExtentFact], to_lsn: int
                  ) -> RecreatePlan:
    """What recreating ``name`` from its media ``point`` (``image_lsn``,
    ``replay_from``) up to ``to_lsn`` reads, and what of it is missing."""
    start = point["replay_from"]
    chain = sorted(extents, key=lambda e: e.first_lsn)
    read = [e for e in chain if (e.end_lsn is None or e.end_lsn > start) and e.first_lsn <= to_lsn]
    return RecreatePlan(
        object=name, image_lsn=point["image_lsn"], replay_from=start, to_lsn=to_lsn,
        extents=tuple(extent_file_name(e.number) for e in read),
        missing=tuple(extent_file_name(e.number) for e in read if not e.present),
        before_log=not chain or start < chain[0].first_lsn)
