"""Administration: MQSC-style commands (``harbormq sc``) and user management.

``mqsc``      parses MQSC text and formats replies (pure)
``commands``  runs parsed commands against the queue manager core, on its loop
``cli``       the ``harbormq sc`` and ``harbormq user`` commands
"""
