"""CHLAUTH records without a server: what SET CHLAUTH accepts and refuses,
address patterns, and MQ's precedence among records (security/chlauth.py)."""

from __future__ import annotations

import pytest

from harbormq.errors import InvalidAttribute
from harbormq.security.chlauth import (
    Rule,
    address_specificity,
    blocking_address_rule,
    blocking_user_rule,
    dn_matches,
    mapping_rule,
    record_attrs,
    record_name,
    user_blocked,
)


def rule(profile: str, **given) -> Rule:
    return Rule.from_attrs(record_attrs(profile, given))


@pytest.mark.parametrize("pattern,host,matches", [
    ("*", "10.1.2.3", True), ("10.1.2.3", "10.1.2.3", True), ("10.1.2.3", "10.1.2.4", False),
    ("10.1.*", "10.1.200.9", True), ("10.1.*", "10.2.0.1", False),
    ("10.1.2.1-20", "10.1.2.20", True), ("10.1.2.1-20", "10.1.2.21", False),
    ("10.*.2.3", "10.99.2.3", True), ("::1", "::1", True), ("::1", "127.0.0.1", False),
    ("127.*", "::ffff:127.0.0.1", True), ("fe80:*", "fe80::1", True),
])
def test_address_patterns(pattern, host, matches):
    assert (address_specificity(pattern, host) is not None) == matches


def test_set_chlauth_refuses_what_mq_refuses():
    with pytest.raises(InvalidAttribute, match="TYPE"):
        record_attrs("*", {})
    with pytest.raises(InvalidAttribute, match="MCAUSER"):
        record_attrs("*", {"TYPE": "ADDRESSMAP", "ADDRESS": "*", "USERSRC": "MAP"})
    with pytest.raises(InvalidAttribute, match="CLNTUSER"):
        record_attrs("*", {"TYPE": "USERMAP", "USERSRC": "CHANNEL"})
    with pytest.raises(InvalidAttribute, match="BLOCKADDR"):
        record_attrs("APP.SVRCONN", {"TYPE": "BLOCKADDR", "ADDRLIST": ["10.*"]})
    with pytest.raises(InvalidAttribute, match="not valid with TYPE"):
        record_attrs("*", {"TYPE": "BLOCKUSER", "USERLIST": ["x"], "ADDRESS": "*"})
    with pytest.raises(InvalidAttribute, match="0..255"):
        record_attrs("*", {"TYPE": "ADDRESSMAP", "ADDRESS": "10.300.*", "USERSRC": "CHANNEL"})
    # the same record, whatever its other attributes: REPLACE and REMOVE find it
    a = record_attrs("*", {"TYPE": "ADDRESSMAP", "ADDRESS": "10.*", "USERSRC": "NOACCESS"})
    b = record_attrs("*", {"TYPE": "ADDRESSMAP", "ADDRESS": "10.*", "USERSRC": "MAP",
                           "MCAUSER": "x", "DESCR": "other"})
    assert record_name("*", a) == record_name("*", b)
    assert record_name("*", a) != record_name("APP.*", a)


def test_the_most_specific_profile_wins_before_the_type_and_the_address():
    rules = [rule("*", TYPE="USERMAP", CLNTUSER="alice", USERSRC="MAP", MCAUSER="generic"),
             rule("APP.*", TYPE="ADDRESSMAP", ADDRESS="*", USERSRC="NOACCESS"),
             rule("APP.SVRCONN", TYPE="ADDRESSMAP", ADDRESS="*", USERSRC="CHANNEL")]
    assert mapping_rule(rules, "APP.SVRCONN", "10.0.0.1", "alice", None).chlprof == "APP.SVRCONN"
    assert mapping_rule(rules, "APP.OTHER", "10.0.0.1", "alice", None).chlprof == "APP.*"
    assert mapping_rule(rules, "SYSTEM.DEF.SVRCONN", "10.0.0.1", "alice",
                        None).mcauser == "generic"
    assert mapping_rule(rules, "SYSTEM.DEF.SVRCONN", "10.0.0.1", "bob", None) is None


def test_within_a_profile_sslpeer_then_user_then_address_then_the_closer_address():
    rules = [rule("*", TYPE="ADDRESSMAP", ADDRESS="10.1.2.3", USERSRC="MAP", MCAUSER="byaddr"),
             rule("*", TYPE="ADDRESSMAP", ADDRESS="10.*", USERSRC="MAP", MCAUSER="wide"),
             rule("*", TYPE="USERMAP", CLNTUSER="alice", USERSRC="MAP", MCAUSER="byuser"),
             rule("*", TYPE="SSLPEERMAP", SSLPEER="CN=app,O=Ex*", USERSRC="MAP",
                  MCAUSER="bycert")]
    pick = lambda host, user=None, dn=None: mapping_rule(rules, "C", host, user, dn).mcauser  # noqa: E731
    assert pick("10.1.2.3", "alice", "CN=app,O=Example,C=GB") == "bycert"
    assert pick("10.1.2.3", "alice", "CN=other") == "byuser"
    assert pick("10.1.2.3", "bob") == "byaddr"
    assert pick("10.7.7.7", "bob") == "wide"
    assert dn_matches("CN=app", "CN=app,O=x") and not dn_matches("CN=app", None)


def test_blockuser_of_the_most_specific_profile_and_mqadmin():
    rules = [rule("*", TYPE="BLOCKUSER", USERLIST=["*MQADMIN"]),
             rule("APP.SVRCONN", TYPE="BLOCKUSER", USERLIST=["nobody"])]
    assert blocking_user_rule(rules, "APP.SVRCONN").chlprof == "APP.SVRCONN"
    assert not user_blocked(blocking_user_rule(rules, "APP.SVRCONN"), "root", True)
    assert user_blocked(blocking_user_rule(rules, "OTHER"), "root", True)
    assert not user_blocked(blocking_user_rule(rules, "OTHER"), "alice", False)
    addr = [rule("*", TYPE="BLOCKADDR", ADDRLIST=["192.168.9.1-20", "10.9.*"])]
    assert blocking_address_rule(addr, "10.9.0.1") and not blocking_address_rule(addr,
                                                                                 "10.8.0.1")
