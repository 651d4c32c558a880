"""Administration: MQSC-style commands and the admin socket.

``mqsc``      parses MQSC text and formats replies (pure)
``commands``  runs parsed commands against the queue manager core, on its loop
``protocol``  the admin socket, server side (the requests it answers)
``client``    the admin socket, client side (every tool uses this one)

The ``harbormq sc`` and ``harbormq user`` commands are in ``cli/admin.py``.
"""
