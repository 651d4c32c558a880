"""Object stores: one LMDB environment per queue and one for the catalog
(``stores.py``), and their directories (``dirs.py``)."""
