"""Joining and leaving a group from the queue manager's life (``create
--qsg``, ``delete``): the functions ``qmgr/`` calls, each one step in the
group's database (``group.py``), returning or taking the member's
``[qsg]`` settings."""

from __future__ import annotations

from ..config import QsgSettings
from . import group


def join_group(name: str, db: str, member: str) -> QsgSettings:
    """``member`` joins group ``name`` in database ``db`` (the first creates
    it); its settings for qm.toml. Refused with nothing changed (GroupError)."""
    group.join(db, name, member)
    return QsgSettings(name=name, db=db)


def leave_group(settings: QsgSettings, member: str) -> None:
    """``member`` leaves its group, when nothing depends on it (GroupError)."""
    group.leave(settings.db, settings.name, member)
