"""STOMP 1.0-1.2 front end: pure frame codec (``frames``), one connection on
the core (``connection``), the listeners of qm.toml (``listener``)."""
