"""qm.toml is checked by one schema (issue 10 §1.7): every key known, of its
type and in its range, or a ConfigError that names the key and the file.
Each bad file here once ended in a traceback or was accepted silently."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

BAD_CONFIGS = [
    ("log = 5\n", "log must be a table"),
    ("[image]\ninterval_minutes = 'x'\n", "image.interval_minutes = 'x' is not a number"),
    ("[tuning]\nflush_interval_ms = 'abc'\n", "tuning.flush_interval_ms = 'abc' is not a whole"),
    ("[tuning]\nflush_interval_ms = -1\n", "tuning.flush_interval_ms = -1 is out of range"),
    ("[tuning]\nflush_max_entries = 0\n", "tuning.flush_max_entries = 0 is out of range"),
    ("[tuning]\nstore_map_size_mb = 0\n", "tuning.store_map_size_mb = 0 is out of range"),
    ("[[listeners]]\nport = 'abc'\n", "listeners[0].port = 'abc' is not a whole number"),
    ("[nonsense]\nx = 1\n", "unknown key(s) nonsense"),
    ("[qsg]\nname = 'G'\ndb = 'x'\nheartbeat_interval = 5.0\nheartbeat_timeout = 10.0\n",
     "at least three heartbeat intervals"),
    ("[stomp]\nmax_frame = 1\n", "unknown key stomp.max_frame"),
    ("[stomp]\nconnauth = 'sometimes'\n", "stomp.connauth = 'sometimes' is not one of"),
    ("[stomp]\nfull_queue_wait_ms = '10s'\n",
     "stomp.full_queue_wait_ms = '10s' is not a whole number"),
    ("[stomp]\nfull_queue_wait_ms = 2.5\n", "stomp.full_queue_wait_ms = 2.5 is not a whole number"),
    ("[stomp]\nfull_queue_wait_ms = true\n",
     "stomp.full_queue_wait_ms = True is not a whole number"),
    ("[stomp]\nfull_queue_wait_ms = -1\n", "stomp.full_queue_wait_ms = -1 is out of range"),
    ("[stomp]\nfull_queue_wait_ms = 86400001\n",
     "stomp.full_queue_wait_ms = 86400001 is out of range"),
    ("[log]\ntype = 'spiral'\n", "log.type = 'spiral' is not one of"),
    ("[log]\nfile_pages = 3\n", "out of range"),
]


@pytest.mark.parametrize("text,said", BAD_CONFIGS, ids=[s for _, s in BAD_CONFIGS])
def test_bad_qm_toml_is_named_key_and_file(make_qm, home, text, said):
    from harbormq.config import QMConfig
    from harbormq.errors import ConfigError
    make_qm()
    path = home / "qmgrs" / "QM1" / "qm.toml"
    path.write_text('name = "QM1"\n' + text)
    with pytest.raises(ConfigError) as info:
        QMConfig.load("QM1", home)
    assert said in info.value.message and str(path) in info.value.message


def test_an_empty_or_misnamed_qm_toml_is_refused(make_qm, home):
    from harbormq.config import QMConfig
    from harbormq.errors import ConfigError
    make_qm()
    path = home / "qmgrs" / "QM1" / "qm.toml"
    for text in ("", 'name = "OTHER"\n'):
        path.write_text(text)
        with pytest.raises(ConfigError, match="does not match the queue manager's directory"):
            QMConfig.load("QM1", home)


def test_full_queue_wait_ms_default_zero_and_older_files(make_qm, home):
    """Flow control's wait: 10 s by default (written by create), 0 allowed (fail at
    once, as MQPUT), and a qm.toml from before the setting loads with the default."""
    import tomllib

    import tomli_w

    from harbormq.config import QMConfig
    make_qm()
    path = home / "qmgrs" / "QM1" / "qm.toml"
    data = tomllib.loads(path.read_text())
    assert data["stomp"]["full_queue_wait_ms"] == 10_000
    assert QMConfig.load("QM1", home).stomp.full_queue_wait_ms == 10_000
    data["stomp"]["full_queue_wait_ms"] = 0
    path.write_text(tomli_w.dumps(data))
    assert QMConfig.load("QM1", home).stomp.full_queue_wait_ms == 0
    del data["stomp"]["full_queue_wait_ms"]
    path.write_text(tomli_w.dumps(data))
    assert QMConfig.load("QM1", home).stomp.full_queue_wait_ms == 10_000


_toml_values = st.recursive(
    st.one_of(st.integers(-2**40, 2**40), st.floats(allow_nan=False), st.booleans(),
              st.text(max_size=10)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=8)
_known_keys = st.sampled_from(["log", "tuning", "image", "listeners", "stomp", "type", "port",
                               "flush_interval_ms", "file_pages", "schedule", "connauth",
                               "heartbeat_ms", "full_queue_wait_ms", "x"])


@given(st.dictionaries(_known_keys | st.text(max_size=6), _toml_values, max_size=5))
def test_any_qm_toml_loads_or_fails_with_a_config_error(tmp_path_factory, data):
    """Fuzzed qm.toml (of any shape): a checked config or ConfigError, nothing else."""
    import tomli_w

    from harbormq.config import QMConfig
    from harbormq.errors import ConfigError
    home = tmp_path_factory.mktemp("fuzz")
    d = home / "qmgrs" / "QM1"
    d.mkdir(parents=True)
    try:
        text = tomli_w.dumps({"name": "QM1", **data})
    except (TypeError, ValueError):
        return
    (d / "qm.toml").write_text(text)
    try:
        QMConfig.load("QM1", home)
    except ConfigError:
        pass

