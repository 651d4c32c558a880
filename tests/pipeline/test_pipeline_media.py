"""The pipeline over media images the engine wrote (issue 5 §5): a queue imaged
while units of work were in flight, then recreated from its image, then worked
on again. The rebuild must start from the latest image before the point and
still equal the engine's state; with the extents before the image deleted, as
`log need` allows, it must start from the image because nothing older is left."""

from __future__ import annotations

from support.differential import all_rows, engine_state, spark_rebuilt

from harbormq.pipeline.algebra import CONTROL_TYPES, plan_targets, reference_rebuild
from harbormq.pipeline.logdata import LogInput
from harbormq.recovery import images as media_images
from harbormq.recovery import recreate


def _expected(state: dict, queues) -> dict:
    return {q: [(m[0], m[1], m[2], m[3], m[4]) for m in state[q]] for q in queues}


def _reference(rows, lsn: int, queues) -> tuple[dict, dict]:
    control = [r for r in rows if r["type"] in CONTROL_TYPES and r["lsn"] <= lsn]
    targets = plan_targets(control, lsn, list(queues), 0)
    ref = reference_rebuild(rows, lsn, targets)
    got = {q: [(m["msg_id"], m["priority"], m["seq"], m["backout_count"], m["locked_uow"])
               for m in ref[q]] for q in queues}
    return got, {t.queue: t.image_id for t in targets}


def test_rebuild_from_engine_images_of_a_queue_imaged_and_recreated(make_qm, open_qm, spark):
    make_qm("QM1", log_type="linear", log_file_pages=32, checkpoint_records=200)
    qm = open_qm("QM1")
    queues = ("IMG.Q", "OTHER.Q")
    for q in queues:
        qm.define_queue(q, DEFPSIST="YES", BOTHRESH=0)
    for i in range(300):
        qm.put(queues[i % 2], f"before-{i}".encode(), priority=i % 4)
    for _ in range(60):
        qm.get("IMG.Q")
    in_flight = qm.begin()                 # spans the image: begun before, committed after
    in_flight.put("IMG.Q", b"in-flight put")
    in_flight.get("IMG.Q")
    backed_out = qm.begin()
    backed_out.get("IMG.Q")

    qm._call(media_images.image_object(qm.core, "IMG.Q"))
    snapshots = [engine_state(qm)]
    in_flight.commit()
    backed_out.backout()
    for i in range(200):
        qm.put("IMG.Q", f"after-{i}".encode(), priority=(i * 7) % 10)
    for _ in range(50):
        qm.get("IMG.Q")
    snapshots.append(engine_state(qm))

    qm._call(recreate.recreate_queue(qm.core, "IMG.Q"))
    for i in range(40):
        qm.put("IMG.Q", f"late-{i}".encode())
    qm.get("IMG.Q")
    snapshots.append(engine_state(qm))

    log_dir = qm.config.log_dir
    rows = all_rows(str(log_dir))
    assert any(r["type"] == "MEDIA_IMAGE_END" and r["object"] == "IMG.Q" for r in rows)
    for lsn, state in snapshots:
        got, images = _reference(rows, lsn, queues)
        assert got == _expected(state, queues)
        assert images["IMG.Q"], "a rebuild after the image starts from it"

    # the operator deletes what `log need` says media recovery and restart do not need;
    # more log first, so that fresh images lie in a later extent than the history
    for _ in range(300):
        qm.put("OTHER.Q", b"x" * 1024)
        qm.get("OTHER.Q")
    qm.checkpoint()
    qm._call(media_images.image_objects(qm.core, "all", None))
    qm.checkpoint()
    qm.put("IMG.Q", b"after the last images")
    final_lsn, final_state = engine_state(qm)
    need = qm.log_need()
    assert need["removable"], f"imaging every object frees the oldest extents: {need}"
    for name in need["removable"]:
        (log_dir / name).unlink()
    # what is left is enough for a point after the images, which the rebuild
    # must start from (Spark this time)
    source = LogInput(log=str(log_dir))
    got, targets = spark_rebuilt(spark, source, final_lsn, queues, plan_queues=list(queues))
    assert all(t.image_id for t in targets)
    assert got == _expected(final_state, queues)
    assert sum(len(v) for v in got.values()) > 300
