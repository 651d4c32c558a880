"""The ``harbormq`` command: one module per command group.

Each module holds one group of commands, its usage text in its docstring,
and a ``register(cli)`` that adds its commands to the root group in
``main.py`` (litestream's shape: one file per command):

* ``lifecycle.py``: create, start, stop, delete, status;
* ``log.py``: the ``log`` group (dump, map, need, archive, archived, delete,
  scrub, recover-copy, rebuild-control, crestart) and ``reset-log``;
* ``media.py``: image, recreate;
* ``unload.py``: unload, load, dump-config;
* ``backup.py``: backup (take, verify), restore;
* ``standby.py``: replay, activate;
* ``admin.py``: sc, user;
* ``trigger.py``: trigger-monitor (runmqtrm);
* ``main.py``: the root group, ``tour`` (``tour.py`` runs it) and ``main``,
  which turns every error into one operator message and an exit status.
  ``pipeline`` comes from ``harbormq.pipeline.cli``.

Beside them: ``consoles.py`` (where output goes), ``options.py`` (what
several groups parse alike), ``progress.py`` and ``starting.py``.

Plan-first commands print a plan, then carry it out: ``recreate``,
``restore``, ``log recover-copy``, ``log rebuild-control``, ``log crestart``,
``reset-log``, ``log delete``. One convention for all (docs/administration.md,
"Plan-first commands"): a command acts when run, as an MQ operator expects,
and ``--dry-run`` only shows what it would do, as litestream's does:

* ``--dry-run`` prints the plan and changes nothing;
* without it the command carries the plan out;
* those that destroy or give up data (``log crestart``, ``reset-log``,
  ``log rebuild-control``, ``log delete``) first ask, on a terminal, unless
  ``--yes``; ``--dry-run`` with ``--yes`` is refused;
* off a terminal nobody can answer: scripts give ``--yes``. Without it
  ``log crestart``, ``log rebuild-control`` and ``reset-log`` only print the
  plan and ``log delete`` deletes, each as it did before it asked
  (``options.plan_first``).
"""

from .main import main

__all__ = ["main"]
