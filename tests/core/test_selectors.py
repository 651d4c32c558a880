"""Message selectors (``core/selectors.py``): the SQL-92 language of JMS
against reference implementations (three-valued logic, LIKE, integer
arithmetic), the header fields, STOMP's string properties, and errors that
name the position."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harbormq.core.selectors import SelectorError, compile_selector
from harbormq.log.records import Message


def msg(**props) -> Message:
    return Message(body=b"x", msg_id=bytes.fromhex("0a0b0c"), correl_id=b"order-7", priority=6,
                   persistent=True, put_time_ns=1_700_000_000_123_000_000,
                   expiry_ns=0, backout_count=0, properties=props)


def sel(text: str, m: Message | None = None) -> bool:
    return compile_selector(text).matches(m if m is not None else msg())


# -- the language, case by case ----------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("region = 'EU'", True), ("region <> 'EU'", False), ("region = 'eu'", False),
    ("qty = 12", True), ("qty > 11.5", True), ("qty >= 12 AND qty <= 12", True),
    ("qty < 12", False), ("qty = '12'", True), ("qty = '12 '", False),
    ("name = 'it''s'", True), ("NAME = 'it''s'", False),  # identifiers are case-sensitive
    ("qty BETWEEN 10 AND 12", True), ("qty NOT BETWEEN 10 AND 12", False),
    ("qty BETWEEN 13 AND 20", False), ("qty between 12 and 12", True),
    ("region IN ('US', 'EU')", True), ("region NOT IN ('US', 'EU')", False),
    ("region IN ('US')", False), ("qty IN (11, 12)", True),
    ("region LIKE 'E%'", True), ("region LIKE '_U'", True), ("region LIKE 'E'", False),
    ("code LIKE 'a\\_%' ESCAPE '\\'", True), ("code LIKE 'a!%%' ESCAPE '!'", False),
    ("code NOT LIKE 'a%'", False),
    ("missing IS NULL", True), ("missing IS NOT NULL", False), ("region IS NOT NULL", True),
    ("missing = 1", False), ("NOT missing = 1", False),   # UNKNOWN, and NOT UNKNOWN
    ("missing = 1 OR region = 'EU'", True), ("missing = 1 AND region = 'EU'", False),
    ("NOT (missing = 1 AND region = 'XX')", True),        # UNKNOWN AND FALSE is FALSE
    ("qty * 2 + 1 = 25", True), ("qty / 5 = 2", True), ("-qty = -12", True),
    ("qty - 2 * 3 = 6", True), ("(qty - 2) * 3 = 30", True), ("7 / 2 = 3", True),
    ("-7 / 2 = -3", True), ("7.0 / 2 = 3.5", True), ("qty / 0 = 1", False),
    ("NOT qty / 0 = 1", False),
    ("flag = TRUE", True), ("flag", True), ("NOT flag", False), ("flag = 'true'", True),
    ("word > 3", False), ("NOT word > 3", True),          # unlike types: FALSE
    ("region > 'A'", False),                              # strings: = and <> only
    ("TRUE", True), ("FALSE", False), ("NOT FALSE", True), ("TRUE OR missing", True),
    ("0x0C = qty", True), ("014 = qty", True), ("12L = qty", True), ("1.2E1 = qty", True),
    ("12.0 = qty", True), (".5 < 1", True), ("1.5F > 1", True),
    ("region = 'EU' and qty > 10 or missing = 'x'", True),
    ("$odd_name = 'y'", True), ("über = 'ja'", True),
])
def test_selector_cases(text, expected):
    m = msg(region="EU", qty="12", name="it's", code="a_b", flag="true", word="abc",
            **{"$odd_name": "y", "über": "ja"})
    assert compile_selector(text).matches(m) is expected


def test_header_fields():
    m = msg()
    assert sel("JMSPriority = 6 AND JMSPriority BETWEEN 5 AND 9", m)
    assert sel("JMSMessageID = 'ID:0a0b0c'", m)
    assert sel("JMSCorrelationID = 'order-7' AND JMSCorrelationID LIKE 'order-%'", m)
    assert sel("JMSTimestamp = 1700000000123", m)
    assert sel("JMSDeliveryMode = 'PERSISTENT'", m)
    assert sel("JMSExpiration = 0 AND JMSRedelivered = FALSE AND JMSXDeliveryCount = 1", m)
    assert sel("JMSType IS NULL", m)
    assert sel("JMSType = 'invoice'", msg(type="invoice"))
    m2 = Message(body=b"", priority=0, persistent=False, backout_count=2,
                 expiry_ns=5_000_000_000)
    assert sel("JMSDeliveryMode = 'NON_PERSISTENT' AND JMSCorrelationID IS NULL", m2)
    assert sel("JMSRedelivered AND JMSXDeliveryCount = 3 AND JMSExpiration = 5000", m2)


def test_typed_properties_from_the_api():
    """Properties put through the API keep their JSON types."""
    m = msg(n=3, f=2.5, b=True, s="3")
    assert sel("n = 3 AND f > 2 AND b AND s = 3 AND n + f = 5.5", m)
    assert not sel("b = 1", m)                 # a boolean is not a number
    assert not sel("n LIKE '3'", m)            # LIKE takes strings only


def test_blank_selector_selects_everything():
    assert compile_selector("").matches(msg()) and compile_selector("  \t").matches(msg())


@pytest.mark.parametrize(("text", "position", "fragment"), [
    ("a = ", 5, "expected a value"),
    ("a = 'x", 5, "not closed"),
    ("a ! 3", 3, "'!'"),
    ("1 + 2", 1, "condition"),
    ("'x'", 1, "condition"),
    ("a LIKE b", 8, "pattern in quotes"),
    ("a IN ()", 7, "literal in the IN list"),
    ("a IN ('x' 'y')", 11, ", or )"),
    ("a IS NOT 3", 10, "NULL"),
    ("a = 1 b", 7, "AND, OR or the end"),
    ("NOT 5", 5, "condition"),
    ("a BETWEEN 1 OR 2", 13, "AND between"),
    ("a LIKE 'x' ESCAPE 'ab'", 19, "one character"),
    ("5abc = 1", 1, "'5abc' is not a number"),
    ("AND = 1", 1, "keyword AND"),
    ("(a = 1", 7, ") to close"),
    ("a = 1 AND 'x'", 11, "condition"),
    ("'x' + 1 = 2", 1, "number"),
    ("a NOT = 1", 7, "BETWEEN, LIKE or IN"),
])
def test_errors_name_the_position(text, position, fragment):
    with pytest.raises(SelectorError) as info:
        compile_selector(text)
    err = info.value
    assert err.position == position, str(err)
    assert f"position {position}" in str(err) and fragment in str(err)
    assert err.reason == 2459 and err.msgid == "HMQ2459E"


# -- against reference implementations ------------------------------------------------------

def kleene_and(a, b):
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def kleene_or(a, b):
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def kleene_not(a):
    return None if a is None else not a


#: properties p0..p3: absent (NULL) or a small number
props = st.fixed_dictionaries({}, optional={f"p{i}": st.integers(0, 3) for i in range(4)})


@st.composite
def conditions(draw, depth=3):
    """(selector text, reference evaluator on the properties)."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        name, value = f"p{draw(st.integers(0, 3))}", draw(st.integers(0, 3))
        op = draw(st.sampled_from(["=", "<>", "<", ">", "<=", ">="]))
        ref_ops = {"=": lambda a, b: a == b, "<>": lambda a, b: a != b,
                   "<": lambda a, b: a < b, ">": lambda a, b: a > b,
                   "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b}

        def leaf(p, name=name, value=value, op=op):
            return None if name not in p else ref_ops[op](p[name], value)
        if draw(st.booleans()):
            return f"{name} IS NULL", lambda p, name=name: name not in p
        return f"{name} {op} {value}", leaf
    kind = draw(st.sampled_from(["AND", "OR", "NOT"]))
    if kind == "NOT":
        text, fn = draw(conditions(depth - 1))
        return f"NOT ({text})", lambda p: kleene_not(fn(p))
    lt, lf = draw(conditions(depth - 1))
    rt, rf = draw(conditions(depth - 1))
    combine = kleene_and if kind == "AND" else kleene_or
    return f"({lt}) {kind} ({rt})", lambda p: combine(lf(p), rf(p))


@settings(max_examples=300, deadline=None)
@given(conditions(), props)
def test_three_valued_logic_as_sql_defines_it(cond, p):
    text, reference = cond
    # STOMP carries properties as strings: they compare as the numbers they spell
    m = msg(**{k: str(v) for k, v in p.items()})
    assert compile_selector(text).matches(m) is (reference(p) is True), text


def like_reference(pattern: str, value: str, escape: str | None) -> bool:
    """LIKE by recursion over the pattern (no regex)."""
    tokens = []
    i = 0
    while i < len(pattern):
        if escape is not None and pattern[i] == escape and i + 1 < len(pattern):
            tokens.append(("lit", pattern[i + 1]))
            i += 2
            continue
        ch = pattern[i]
        tokens.append(("any",) if ch == "%" else ("one",) if ch == "_" else ("lit", ch))
        i += 1

    def match(t: int, v: int) -> bool:
        if t == len(tokens):
            return v == len(value)
        tok = tokens[t]
        if tok[0] == "any":
            return any(match(t + 1, k) for k in range(v, len(value) + 1))
        if v == len(value):
            return False
        if tok[0] == "one" or value[v] == tok[1]:
            return match(t + 1, v + 1)
        return False
    return match(0, 0)


@settings(max_examples=400, deadline=None)
@given(st.text("ab%_!.\n", max_size=8), st.text("ab%_!.\n", max_size=8),
       st.sampled_from([None, "!"]))
def test_like_agrees_with_a_reference_matcher(pattern, value, escape):
    quoted = pattern.replace("'", "''")
    text = f"v LIKE '{quoted}'" + (f" ESCAPE '{escape}'" if escape else "")
    assert compile_selector(text).matches(msg(v=value)) is like_reference(pattern, value,
                                                                          escape)


def java_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


@settings(max_examples=300, deadline=None)
@given(st.integers(-1000, 1000), st.integers(-1000, 1000), st.sampled_from("+-*/"))
def test_integer_arithmetic_as_java(a, b, op):
    if op == "/" and b == 0:
        assert not sel("a / b = 0", msg(a=str(a), b=str(b)))
        assert not sel("NOT a / b = 0", msg(a=str(a), b=str(b)))     # UNKNOWN
        return
    expected = {"+": a + b, "-": a - b, "*": a * b}.get(op) if op != "/" else java_div(a, b)
    assert sel(f"a {op} b = {expected}", msg(a=str(a), b=str(b)))
    assert sel(f"{a} {op} ({b}) = {expected}".replace("--", "- -"))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30))
def test_any_string_literal_round_trips(value):
    quoted = value.replace("'", "''")
    assert compile_selector(f"p = '{quoted}'").matches(msg(p=value))
    assert compile_selector(f"p IN ('{quoted}', 'zz')").matches(msg(p=value))


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=60))
def test_any_text_compiles_or_names_a_position(text):
    try:
        s = compile_selector(text)
    except SelectorError as exc:
        assert 1 <= exc.position <= len(text) + 1
        assert re.search(rf"position {exc.position}\b", str(exc))
        return
    # whatever compiles evaluates without raising, on any properties
    for m in (msg(), msg(a="1", b="x", c="true"), msg(a=1, b=2.5, c=None)):
        assert s.matches(m) in (True, False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "1", "'x'", "=", "<>", "<", "AND", "OR", "NOT",
                                 "(", ")", "+", "*", "IS", "NULL", "LIKE", "IN", ",",
                                 "BETWEEN", "ESCAPE", "TRUE", "-", "/", "2.5"]),
                max_size=12))
def test_token_soup_compiles_or_names_a_position(words):
    text = " ".join(words)
    try:
        s = compile_selector(text)
    except SelectorError as exc:
        assert 1 <= exc.position <= len(text) + 1
        return
    assert s.matches(msg(a="1", b="x")) in (True, False)


def test_a_selector_nested_beyond_reason_is_an_error_not_a_crash():
    deep = "(" * 5000 + "a = 1" + ")" * 5000
    with pytest.raises(SelectorError, match="nested too deeply"):
        compile_selector(deep)
    long_chain = " AND ".join(f"p{i} = {i}" for i in range(2000))
    assert compile_selector(long_chain).matches(msg(**{f"p{i}": str(i) for i in range(2000)}))


def test_a_long_selector_error_names_the_position_first():
    """An ERROR frame's message is cut at 500 characters: the position must not
    be behind the selector's text."""
    text = "a = 1 AND " * 100 + "b =="
    with pytest.raises(SelectorError) as info:
        compile_selector(text)
    message = str(info.value)
    assert message.index("position 1004") < 40 and len(message) < 300
