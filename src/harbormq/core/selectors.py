"""Message selectors: SQL-92 conditions on a message's properties and header
fields, as JMS defines them (and MQ's message selectors, ActiveMQ's and
Artemis'). Pure: text in, a predicate on a ``Message`` out; no I/O, no queue.

    sel = compile_selector("region = 'EU' AND JMSPriority > 4")
    sel.matches(message)          # True only when the condition is TRUE

The language (JMS 2.0 §3.8.1):

* literals: strings in single quotes (``''`` is a quote), exact numbers
  (``42``, ``42L``, ``0x2A``, ``052``), approximate numbers (``4.2``, ``.5``,
  ``7E3``, ``1.5F``), ``TRUE`` and ``FALSE``;
* identifiers (case-sensitive, a Java identifier, not a keyword): the header
  fields ``JMSPriority``, ``JMSMessageID`` (``'ID:'`` and the id in hex),
  ``JMSCorrelationID``, ``JMSTimestamp`` (ms), ``JMSType`` (the ``type``
  property), ``JMSDeliveryMode`` (``'PERSISTENT'`` or ``'NON_PERSISTENT'``),
  ``JMSExpiration`` (ms, 0 = never), ``JMSRedelivered``, ``JMSXDeliveryCount``;
  any other name is a message property (a STOMP user header), NULL when the
  message has none;
* ``AND``, ``OR``, ``NOT``; ``= <> < > <= >=``; ``+ - * /`` and unary signs;
  ``[NOT] BETWEEN a AND b``; ``[NOT] LIKE 'pattern' [ESCAPE 'c']`` (``%`` any
  run, ``_`` one character); ``[NOT] IN ('a', 'b', ...)``; ``IS [NOT] NULL``;
  parentheses. Keywords are case-insensitive.

Three-valued logic: a comparison or arithmetic with NULL is UNKNOWN, and
``AND``/``OR``/``NOT`` treat UNKNOWN as SQL does; a message is selected only
when the whole condition is TRUE. Comparing values of unlike types is FALSE
(JMS); strings and booleans compare with ``=`` and ``<>`` only. STOMP carries
every property as a string, so a string compared with (or computed as) a
number is read as one when it is written as one (``'12'`` = 12, as ActiveMQ's
``convertStringExpressions``), and ``'true'``/``'false'`` compare with a
boolean; otherwise the comparison is FALSE. Integer arithmetic stays integral
(``7 / 2`` is 3, as in Java); division by zero is UNKNOWN.

A selector that does not parse raises ``SelectorError`` naming the 1-based
position in the text and what was expected there (MQ's MQRC 2459,
SELECTOR_SYNTAX_ERROR).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..errors import MessageError
from ..log.records import Message

__all__ = ["Selector", "SelectorError", "compile_selector"]


class SelectorError(MessageError):
    """A selector that cannot be parsed: where (1-based) and what was wrong."""
    msgid = "HMQ2459E"
    reason = 2459

    def __init__(self, text: str, position: int, problem: str):
        # the position first: a long selector's text, shortened, comes last
        shown = text if len(text) <= 120 else text[:117] + "..."
        super().__init__(f"selector: position {position}: {problem} (MQRC 2459 "
                         f"SELECTOR_SYNTAX_ERROR) in {shown!r}", position=position)
        self.position = position
        self.problem = problem


# -- tokens ---------------------------------------------------------------------------

KEYWORDS = frozenset({"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN",
                      "IS", "ESCAPE"})
_NUMBER = re.compile(r"""
    (?P<hex>0[xX][0-9a-fA-F]+[lL]?)
  | (?P<approx>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]? | \d+[eE][+-]?\d+[fFdD]? | \d+[fFdD])
  | (?P<exact>\d+[lL]?)
""", re.VERBOSE | re.ASCII)
_DIGITS = frozenset("0123456789")
_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",")


class _Tok:
    __slots__ = ("kind", "value", "pos")

    def __init__(self, kind: str, value, pos: int):
        self.kind = kind        # KEYWORD IDENT STRING NUMBER OP END
        self.value = value
        self.pos = pos          # 1-based

    def describe(self) -> str:
        if self.kind == "END":
            return "the end of the selector"
        if self.kind == "STRING":
            return "'" + self.value.replace("'", "''") + "'"
        return str(self.value)


def _is_ident_start(ch: str) -> bool:
    return ch == "$" or ch == "_" or ch.isalpha()


def _is_ident_part(ch: str) -> bool:
    return ch == "$" or ch == "_" or ch.isalnum()


def _tokens(text: str) -> list[_Tok]:
    out = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        pos = i + 1
        if ch == "'":
            buf = []
            i += 1
            while True:
                if i >= n:
                    raise SelectorError(text, pos, "the string is not closed: expected ' "
                                        "before the end of the selector")
                if text[i] == "'":
                    if i + 1 < n and text[i + 1] == "'":
                        buf.append("'")
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(text[i])
                i += 1
            out.append(_Tok("STRING", "".join(buf), pos))
        elif (ch in _DIGITS or ch == ".") and (m := _NUMBER.match(text, i)) is not None:
            raw = m.group(0)
            end = m.end()
            if end < n and _is_ident_part(text[end]):
                while end < n and _is_ident_part(text[end]):
                    end += 1
                raise SelectorError(text, pos, f"{text[i:end]!r} is not a number")
            out.append(_Tok("NUMBER", _number(raw, m.lastgroup), pos))
            i = end
        elif _is_ident_start(ch):
            j = i + 1
            while j < n and _is_ident_part(text[j]):
                j += 1
            word = text[i:j]
            if word.upper() in KEYWORDS:
                out.append(_Tok("KEYWORD", word.upper(), pos))
            else:
                out.append(_Tok("IDENT", word, pos))
            i = j
        else:
            for op in _OPERATORS:
                if text.startswith(op, i):
                    out.append(_Tok("OP", op, pos))
                    i += len(op)
                    break
            else:
                raise SelectorError(text, pos, f"{ch!r} is not part of the selector "
                                    "language")
    out.append(_Tok("END", None, n + 1))
    return out


def _number(raw: str, kind: str) -> int | float:
    if kind == "hex":
        return int(raw.rstrip("lL"), 16)
    if kind == "approx":
        return float(raw.rstrip("fFdD"))
    digits = raw.rstrip("lL")
    if len(digits) > 1 and digits.startswith("0"):
        try:
            return int(digits, 8)        # Java's octal literal
        except ValueError:
            return int(digits)
    return int(digits)


# -- values and their rules -------------------------------------------------------------
#
# A value is None (NULL, UNKNOWN), bool, int, float or str. The evaluator is a
# tree of closures, each taking the message.

Eval = Callable[[Message], object]
_NUMERIC_TEXT = re.compile(r"^\s*[+-]?(?:\d{1,300}(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,4})?\s*$")


def _as_number(v):
    """A number, or the number a string property is written as; None if neither."""
    t = type(v)
    if t is int or t is float:
        return v
    if t is str and _NUMERIC_TEXT.match(v):
        s = v.strip()
        try:
            return int(s)
        except ValueError:
            return float(s)
    return None


def _as_bool(v):
    """TRUE, FALSE or None (UNKNOWN) for a value used as a condition."""
    if v is True or v is False or v is None:
        return v
    if type(v) is str:
        low = v.lower()
        if low == "true":
            return True
        if low == "false":
            return False
    return None


def _compare(op: str, a, b):
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is str and tb is str or ta is bool and tb is bool:
        if op == "=":
            return a == b
        if op == "<>":
            return a != b
        return False                     # strings and booleans: = and <> only
    if ta is bool or tb is bool:
        a, b = _as_bool(a), _as_bool(b)
        if a is None or b is None or op not in ("=", "<>"):
            return False
        return (a == b) if op == "=" else (a != b)
    a, b = _as_number(a), _as_number(b)
    if a is None or b is None:
        return False                     # unlike types
    if op == "=":
        return a == b
    if op == "<>":
        return a != b
    if op == "<":
        return a < b
    if op == ">":
        return a > b
    if op == "<=":
        return a <= b
    return a >= b


def _arith(op: str, a, b):
    a, b = _as_number(a), _as_number(b)
    if a is None or b is None:
        return None
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        return None
    if type(a) is int and type(b) is int:
        q = abs(a) // abs(b)             # Java: truncated toward zero
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _like_regex(pattern: str, escape: str | None) -> re.Pattern:
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


# -- header fields -----------------------------------------------------------------------

def _correl(m: Message):
    return m.correl_id.decode("utf-8", "backslashreplace") if m.correl_id else None


HEADER_FIELDS: dict[str, Eval] = {
    "JMSPriority": lambda m: m.priority,
    "JMSMessageID": lambda m: "ID:" + m.msg_id.hex(),
    "JMSCorrelationID": _correl,
    "JMSTimestamp": lambda m: m.put_time_ns // 1_000_000,
    "JMSType": lambda m: m.properties.get("type"),
    "JMSDeliveryMode": lambda m: "PERSISTENT" if m.persistent else "NON_PERSISTENT",
    "JMSExpiration": lambda m: m.expiry_ns // 1_000_000,
    "JMSRedelivered": lambda m: m.backout_count > 0,
    "JMSXDeliveryCount": lambda m: m.backout_count + 1,
}


# -- the parser ------------------------------------------------------------------------------

class _Node:
    """A compiled expression: its evaluator, its static kind (bool, num, str or
    any) and where it starts in the text, for errors."""
    __slots__ = ("fn", "kind", "pos", "literal")

    def __init__(self, fn: Eval, kind: str, pos: int, literal: bool = False):
        self.fn, self.kind, self.pos = fn, kind, pos
        self.literal = literal          # a constant: fn ignores the message


def _const(value, pos: int) -> _Node:
    kind = ("bool" if type(value) is bool else "str" if type(value) is str else
            "any" if value is None else "num")
    return _Node(lambda m: value, kind, pos, literal=True)


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        tok = self.toks[self.i]
        if tok.kind != "END":
            self.i += 1
        return tok

    def at(self, kind: str, value=None) -> bool:
        tok = self.toks[self.i]
        return tok.kind == kind and (value is None or tok.value == value)

    def fail(self, tok: _Tok, problem: str) -> SelectorError:
        return SelectorError(self.text, tok.pos, problem)

    def expect(self, kind: str, value, what: str) -> _Tok:
        tok = self.next()
        if tok.kind != kind or tok.value != value:
            raise self.fail(tok, f"expected {what}, found {tok.describe()}")
        return tok

    def condition(self, node: _Node, where: str) -> _Node:
        if node.kind not in ("bool", "any"):
            raise SelectorError(self.text, node.pos, f"expected a condition {where}, found "
                                f"{'a string' if node.kind == 'str' else 'a number'}")
        return node

    def arithmetic(self, node: _Node, op: str) -> _Node:
        if node.kind not in ("num", "any"):
            raise SelectorError(self.text, node.pos, f"expected a number for {op!r}, found "
                                f"{'a string' if node.kind == 'str' else 'a condition'}")
        return node

    def parse(self) -> _Node:
        node = self.condition(self.or_expr(), "as the selector")
        tok = self.peek()
        if tok.kind != "END":
            raise self.fail(tok, f"expected AND, OR or the end of the selector, found "
                            f"{tok.describe()}")
        return node

    def or_expr(self) -> _Node:
        return self.chain("OR", self.and_expr, decisive=True)

    def and_expr(self) -> _Node:
        return self.chain("AND", self.not_expr, decisive=False)

    def chain(self, keyword: str, operand, decisive: bool) -> _Node:
        """``a OR b OR ...`` (decided by the first TRUE) or ``a AND b AND ...``
        (by the first FALSE), UNKNOWN if an operand was and none decided. One
        node over a list: a long chain must not nest a closure per operand
        (evaluating it would recurse as deep)."""
        first = operand()
        parts = [first]
        while self.at("KEYWORD", keyword):
            self.next()
            parts.append(self.condition(operand(), f"after {keyword}"))
        if len(parts) == 1:
            return first
        self.condition(first, f"before {keyword}")
        fns = tuple(p.fn for p in parts)

        def combined(m):
            unknown = False
            for fn in fns:
                v = _as_bool(fn(m))
                if v is decisive:
                    return decisive
                if v is None:
                    unknown = True
            return None if unknown else not decisive
        return _Node(combined, "bool", first.pos)

    def not_expr(self) -> _Node:
        if self.at("KEYWORD", "NOT"):
            tok = self.next()
            inner = self.condition(self.not_expr(), "after NOT")
            fn = inner.fn

            def negate(m, fn=fn):
                v = _as_bool(fn(m))
                return None if v is None else not v
            return _Node(negate, "bool", tok.pos)
        return self.predicate()

    def predicate(self) -> _Node:
        left = self.sum()
        tok = self.peek()
        if tok.kind == "OP" and tok.value in ("=", "<>", "<", ">", "<=", ">="):
            self.next()
            right = self.sum()
            lf, rf, op = left.fn, right.fn, tok.value
            if right.literal and right.kind == "str" and op in ("=", "<>"):
                # the commonest selector, property = 'text': no general compare
                text, equal = rf(None), op == "="

                def compare_text(m):
                    v = lf(m)
                    if type(v) is str:
                        return (v == text) is equal
                    return _compare(op, v, text)
                return _Node(compare_text, "bool", left.pos)
            return _Node(lambda m: _compare(op, lf(m), rf(m)), "bool", left.pos)
        if tok.kind != "KEYWORD":
            return left
        negated = False
        if tok.value == "NOT":
            self.next()
            negated = True
            tok = self.peek()
            if tok.kind != "KEYWORD" or tok.value not in ("BETWEEN", "LIKE", "IN"):
                raise self.fail(tok, f"expected BETWEEN, LIKE or IN after NOT, found "
                                f"{tok.describe()}")
        if tok.value == "BETWEEN":
            node = self.between(left)
        elif tok.value == "LIKE":
            node = self.like(left)
        elif tok.value == "IN":
            node = self.in_list(left)
        elif tok.value == "IS":
            return self.is_null(left)
        else:
            return left
        if negated:
            fn = node.fn
            node = _Node(lambda m: (lambda v: None if v is None else not v)(fn(m)), "bool",
                         node.pos)
        return node

    def between(self, left: _Node) -> _Node:
        self.next()
        low = self.sum()
        self.expect("KEYWORD", "AND", "AND between the bounds of BETWEEN")
        high = self.sum()
        xf, lf, hf = left.fn, low.fn, high.fn

        def within(m):
            x = xf(m)
            a = _compare(">=", x, lf(m))
            if a is False:
                return False
            b = _compare("<=", x, hf(m))
            if b is False:
                return False
            return None if a is None or b is None else True
        return _Node(within, "bool", left.pos)

    def like(self, left: _Node) -> _Node:
        self.next()
        tok = self.next()
        if tok.kind != "STRING":
            raise self.fail(tok, f"expected a pattern in quotes after LIKE, found "
                            f"{tok.describe()}")
        escape = None
        if self.at("KEYWORD", "ESCAPE"):
            self.next()
            esc = self.next()
            if esc.kind != "STRING" or len(esc.value) != 1:
                raise self.fail(esc, f"expected one character in quotes after ESCAPE, found "
                                f"{esc.describe()}")
            escape = esc.value
        pattern = _like_regex(tok.value, escape)
        fn = left.fn

        def like(m):
            v = fn(m)
            if v is None:
                return None
            return type(v) is str and pattern.fullmatch(v) is not None
        return _Node(like, "bool", left.pos)

    def in_list(self, left: _Node) -> _Node:
        self.next()
        self.expect("OP", "(", "( after IN")
        items = []
        while True:
            tok = self.next()
            if tok.kind in ("STRING", "NUMBER"):
                items.append(tok.value)
            elif tok.kind == "OP" and tok.value in ("-", "+") and self.at("NUMBER"):
                value = self.next().value
                items.append(-value if tok.value == "-" else value)
            elif tok.kind == "KEYWORD" and tok.value in ("TRUE", "FALSE"):
                items.append(tok.value == "TRUE")
            else:
                raise self.fail(tok, f"expected a literal in the IN list, found "
                                f"{tok.describe()}")
            tok = self.next()
            if tok.kind == "OP" and tok.value == ")":
                break
            if not (tok.kind == "OP" and tok.value == ","):
                raise self.fail(tok, f"expected , or ) in the IN list, found {tok.describe()}")
        fn = left.fn
        strings = frozenset(x for x in items if type(x) is str)
        if len(strings) == len(items):
            def member(m):
                v = fn(m)
                if v is None:
                    return None
                if type(v) is str:
                    return v in strings
                return any(_compare("=", v, x) for x in items)
        else:
            def member(m):
                v = fn(m)
                if v is None:
                    return None
                return any(_compare("=", v, x) for x in items)
        return _Node(member, "bool", left.pos)

    def is_null(self, left: _Node) -> _Node:
        self.next()
        negated = False
        if self.at("KEYWORD", "NOT"):
            self.next()
            negated = True
        self.expect("KEYWORD", "NULL", "NULL after IS" + (" NOT" if negated else ""))
        fn = left.fn
        if negated:
            return _Node(lambda m: fn(m) is not None, "bool", left.pos)
        return _Node(lambda m: fn(m) is None, "bool", left.pos)

    def sum(self) -> _Node:
        return self.arithmetic_chain(("+", "-"), self.product)

    def product(self) -> _Node:
        return self.arithmetic_chain(("*", "/"), self.unary)

    def arithmetic_chain(self, ops: tuple, operand) -> _Node:
        """``a op b op c ...``, left to right, for operators of one precedence."""
        left = operand()
        while self.peek().kind == "OP" and self.peek().value in ops:
            op = self.next().value
            right = self.arithmetic(operand(), op)
            self.arithmetic(left, op)
            lf, rf = left.fn, right.fn
            left = _Node(lambda m, op=op, lf=lf, rf=rf: _arith(op, lf(m), rf(m)), "num",
                         left.pos)
        return left

    def unary(self) -> _Node:
        tok = self.peek()
        if tok.kind == "OP" and tok.value in ("+", "-"):
            self.next()
            inner = self.arithmetic(self.unary(), tok.value)
            if tok.value == "+":
                fn = inner.fn
                return _Node(lambda m: _as_number(fn(m)), "num", tok.pos)
            if inner.kind == "num" and self.toks[self.i - 1].kind == "NUMBER":
                value = -inner.fn(None)      # a negative literal, folded once
                return _Node(lambda m: value, "num", tok.pos)
            fn = inner.fn
            return _Node(lambda m: (lambda v: None if v is None else -v)(_as_number(fn(m))),
                         "num", tok.pos)
        return self.primary()

    def primary(self) -> _Node:
        tok = self.next()
        if tok.kind == "NUMBER" or tok.kind == "STRING":
            return _const(tok.value, tok.pos)
        if tok.kind == "KEYWORD":
            if tok.value in ("TRUE", "FALSE"):
                return _const(tok.value == "TRUE", tok.pos)
            if tok.value == "NULL":
                return _const(None, tok.pos)
            raise self.fail(tok, f"expected a value, found the keyword {tok.value}")
        if tok.kind == "IDENT":
            name = tok.value
            field = HEADER_FIELDS.get(name)
            if field is not None:
                return _Node(field, "any", tok.pos)
            return _Node(lambda m: m.properties.get(name), "any", tok.pos)
        if tok.kind == "OP" and tok.value == "(":
            inner = self.or_expr()
            self.expect("OP", ")", ") to close the (")
            return _Node(inner.fn, inner.kind, tok.pos)
        raise self.fail(tok, f"expected a value, an identifier or (, found {tok.describe()}")


# -- the API -------------------------------------------------------------------------------

class Selector:
    """A compiled selector. ``matches(message)``: the condition is TRUE for it.

    It is also a get's match for ``LocalQueue`` (called on each candidate,
    ``index_type`` None: no index serves it)."""

    index_type = None
    ident = None

    __slots__ = ("text", "_fn", "__weakref__")

    def __init__(self, text: str, fn: Eval | None):
        self.text = text
        self._fn = fn

    def matches(self, message: Message) -> bool:
        if self._fn is None:
            return True
        try:
            return _as_bool(self._fn(message)) is True
        except (ArithmeticError, ValueError, TypeError, RecursionError):
            return False        # e.g. a float overflow: no match, never an error

    __call__ = matches

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"


def compile_selector(text: str) -> Selector:
    """The selector ``text`` compiled (an empty or blank text selects every
    message, as JMS's null selector); SelectorError when it does not parse."""
    if not isinstance(text, str):
        raise TypeError(f"a selector is text, not {type(text).__name__}")
    if not text.strip():
        return Selector(text, None)
    try:
        return Selector(text, _Parser(text).parse().fn)
    except RecursionError:
        raise SelectorError(text, 1, "the selector is nested too deeply") from None
