"""Backups, restores and their verification (docs/backup.md).

``take.py`` takes a backup, hot or cold, full or incremental, and rotates
them; ``restore.py`` plans and applies a restore; ``verify.py`` checks a
backup by a trial restore (``trial.py``); ``materialize.py`` builds a stopped
queue manager out of backup files and log extents (for the restore and the
trial); ``manifest.py`` is the manifest and the directory of backups;
``copying.py`` the durable, counted copies and the LMDB snapshot.

The layer sits above ``qmgr`` (the instance lock, a trial restore's start)
and below the front ends: the admin socket's server side answers a hot
backup's requests (``backup_point``), and the command line hands the backup
its client (``ask``), so nothing here imports ``admin``.
"""
