"""A publisher for tests/pubsub/test_pubsub_recovery.py, killed with SIGKILL:
``python pubsub_child.py HOME QM`` subscribes (durable, named SUB.M managed and
SUB.P on queue PROVIDED) to ``crash/#``, then publishes ``p-<i>`` persistent to
``crash/t`` with retain, printing ``ack <i>`` once each publish has returned
(it is on disk then), until it is killed."""

from __future__ import annotations

import sys

from harbormq import QueueManager
from harbormq.log.records import Message


def main() -> None:
    home, name = sys.argv[1], sys.argv[2]
    qm = QueueManager.open(name, home=home)
    ps = qm.core.pubsub
    if "PROVIDED" not in qm.queue_names():
        qm.define_queue("PROVIDED", DEFPSIST="YES", MAXDEPTH=999_999)
    qm._call(ps.subscribe("crash/#", name="SUB.M", durable=True))
    qm._call(ps.subscribe("crash/#", name="SUB.P", durable=True, dest="PROVIDED"))
    print("ready", flush=True)
    i = 0
    while True:
        qm._call(ps.publish("crash/t", Message(f"p-{i}".encode(), persistent=True),
                            retain=True))
        print(f"ack {i}", flush=True)
        i += 1


if __name__ == "__main__":
    main()
