"""Publish/subscribe: the topic tree, topic objects' attributes, subscriptions
(administrative and application, durable and not) and retained publications.

A layer directly above the core (beside ``recovery/`` and ``unload/``): its
state is the core's objects and queues (TOPIC definitions in the catalog,
subscriptions and retained publications as messages on the status queues), so
it needs no log record of its own. ``service.py`` holds the ``PubSub`` service
the front ends call (its contract is in that module's docstring),
``topics.py`` the tree and its matching, ``status.py`` the status queues.
"""
