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
* ``main.py``: the root group, ``tour`` (``tour.py`` runs it) and ``main``,
  which turns every error into one operator message and an exit status.
  ``pipeline`` comes from ``harbormq.pipeline.cli``.

Beside them: ``consoles.py`` (where output goes), ``options.py`` (what
several groups parse alike), ``progress.py`` and ``starting.py``.
"""

from .main import main

__all__ = ["main"]
