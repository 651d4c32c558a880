"""The queue sharing group on PostgreSQL (docs/qsg.md): the group's members,
its shared definitions and structures, shared queues whose messages live in
PostgreSQL (z/OS's coupling facility), their units of work and peer recovery.

The only package that imports the PostgreSQL driver (psycopg 3, the optional
``qsg`` extra); the layers above reach PostgreSQL through it alone."""
