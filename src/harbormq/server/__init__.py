"""The queue manager as a process: the core, its admin socket and its STOMP
listeners (``python -m harbormq.server QM``)."""
