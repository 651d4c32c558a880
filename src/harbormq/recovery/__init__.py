"""Recovery from crashes and losses: restart in phases (``restart.py``), media
images (``images.py``), media recovery (``recreate.py``) and which log
extents are still needed (``need.py``)."""
