"""MQSC fuzzed with hypothesis: any text, and commands generated from the
grammar (``mqsc.SPECS``) with hostile names and values, well-formed or
mutated. They are parsed on their own, and run on a real queue manager server
through its admin socket, as ``harbormq sc`` runs them (``commands.run_mqsc``
on the queue manager's loop).

The properties: the parser gives a command or a syntax error naming the line
and column, never anything else; a well-formed command parses back to what
was generated; every command run gives a result or a harbormq error with its
message id, never an unexpected exception (which run_mqsc reports as "the
command failed") or a traceback in the server's output; nothing appears
outside the queue manager's own directories (the server's home tree, working
directory and TMPDIR are compared before and after each script), and its
queues directory holds one store per queue; no script goes unanswered for
long (``support.admin_fuzz.GUARD_S``).

The admin socket itself is fuzzed in ``test_fuzz_admin_protocol.py``.
"""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from support.admin_fuzz import FuzzServer
from support.stomp_helpers import raw_connected

from harbormq.admin import mqsc
from harbormq.admin.commands import _error_text
from harbormq.admin.mqsc import (
    SPECS,
    WHERE_OPS,
    Command,
    MqscSyntaxError,
    format_syntax_error,
    generic_match,
    parse_script,
)
from harbormq.fsutil import file_name
from harbormq.security.authority import ORDER

#: what ``str.splitlines`` (and so the MQSC reader) ends a line at
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"

any_char = st.characters(exclude_categories=())          # lone surrogates included
any_text = st.text(any_char, max_size=80)
one_line = st.text(st.characters(exclude_categories=(), exclude_characters=LINE_BREAKS),
                   max_size=60)

HOSTILE_NAMES = [
    ".", "..", "/", "./", "../x", "../../../../tmp/escaped", "/tmp/escaped", "a/../../b",
    "%2E%2E", "%2F", "Q\x00", "\x00", "x" * 48, "x" * 49, "x" * 4000, "é", "日本語",
    "Q'Q", "'", "''", "*", "Q*", "**", "~", "$HOME", "a b", " ", "\t", "(", ")", ",", "+",
    "-", "\ud800", "qmgr", "queues", "qm.toml", "SYSTEM.DEFAULT.LOCAL.QUEUE",
    "SYSTEM.DEAD.LETTER.QUEUE", "CON", "NUL", "A" * 30 + "*" * 18, "*" * 30 + "A",
]
#: names the scripts share, so that what one command defines the next one finds
POOL = ["FZ.A", "FZ.B", "FZ.C", "fz.a", "FZ*", "*", "SYSTEM.DEFAULT.LOCAL.QUEUE",
        "FZ.M", "FZ.U"]
names = st.one_of(st.sampled_from(POOL), st.sampled_from(POOL), st.sampled_from(HOSTILE_NAMES),
                  st.from_regex(r"[A-Za-z0-9._/%]{1,48}", fullmatch=True), any_text)
numbers = st.one_of(st.integers(0, 9).map(str), st.integers(-5, 12).map(str),
                    st.integers(-2**70, 2**70).map(str),
                    st.sampled_from(["", "0", "999999999", "1000000000", "104857600",
                                     "104857601", "-0", "+3", " 5 ", "1_0", "0x10", "1e3",
                                     "٣", "9" * 5000, "NaN", "inf"]))
#: authority record profiles: names and wildcards, many '**' included (a regex
#: matcher once backtracked exponentially on them: security.profile_matches)
profiles = st.one_of(st.sampled_from(["*", "**", "Q.*", "?", "PAY.**", "A?B", "..", "",
                                      "x" * 49, "FZ.*", "**.**.**.**.**.**.**.**.**.**.X",
                                      "*" * 48]),
                     st.from_regex(r"[A-Za-z0-9._/%?*]{1,48}", fullmatch=True), any_text)


CHOICES = {
    "DEFPSIST": ["YES", "NO"], "INDXTYPE": ["NONE", "MSGID", "CORRELID"],
    "GET": ["ENABLED", "DISABLED"], "PUT": ["ENABLED", "DISABLED"],
    "OBJTYPE": ["QUEUE", "QMGR"], "TYPE": ["QLOCAL", "ALL", "*", "QUEUE", "HANDLE", "CONN"],
}
NUMERIC = ("DEFPRTY", "MAXDEPTH", "MAXMSGL", "BOTHRESH")
#: values a queue manager accepts, so that sane scripts get past the first command
SANE = {
    **{k: st.sampled_from(v) for k, v in CHOICES.items()},
    **{k: st.integers(0, 9).map(str) for k in NUMERIC},
    "NAME": st.sampled_from(POOL), "BOQNAME": st.sampled_from(POOL[:3]),
    "DEADQ": st.sampled_from(POOL[:3]),
    "LIKE": st.sampled_from(["FZ.A", "SYSTEM.DEFAULT.LOCAL.QUEUE"]),
    "PROFILE": st.sampled_from(["FZ.*", "FZ.A", "**", "*"]),
    "PRINCIPAL": st.sampled_from(["app", "APP"]), "GROUP": st.sampled_from(["ops"]),
    "DESCR": st.text(st.sampled_from("ab '"), max_size=12),
    "WHERE": st.sampled_from(["0", "1", "FZ*", "YES", "QLOCAL", "S0000000.LOG"]),
}


#: sane scripts work on queues more often than not
QUEUE_COMMANDS = [("DEFINE", "QLOCAL")] * 6 + [("ALTER", "QLOCAL"), ("DISPLAY", "QUEUE"),
                                               ("DISPLAY", "QSTATUS"), ("CLEAR", "QLOCAL")] * 2


def value_strategy(kw: str, mode: str):
    """Values for keyword ``kw`` (or the object's NAME): ``sane`` ones, ``wild``
    ones (valid, invalid and hostile), or ``one_line`` (any text without a line
    break, for the round trip)."""
    if mode == "one_line":
        return one_line
    if mode == "sane":
        return SANE.get(kw, st.sampled_from(["FZ.A", "x"]))
    if kw in CHOICES:
        return st.one_of(st.sampled_from(CHOICES[kw] + ["QLOCAL", "CHANNEL", "SELF"]),
                         any_text)
    if kw in NUMERIC:
        return numbers
    if kw in ("NAME", "BOQNAME", "DEADQ", "LIKE"):
        return names
    if kw == "PROFILE":
        return profiles
    if kw == "DESCR":
        return st.one_of(any_text, st.sampled_from(["x" * 64, "x" * 5000]))
    return any_text


def render_value(value: str, quoted: bool) -> tuple[str, str]:
    """(MQSC text, the value the parser gives back): unquoted values are folded
    to upper case, quoted ones keep everything, '' being one quote."""
    if not quoted and value and not any(c.isspace() or c in "(),'" for c in value):
        return value, value.upper()
    return "'" + value.replace("'", "''") + "'", value


def random_case(draw, word: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return "".join(c.lower() if f else c for c, f in zip(word, flips, strict=True))


@st.composite
def grammar_command(draw, mode: str = "wild") -> tuple[list[str], Command]:
    """One command from the grammar: (its tokens, the Command the parser must
    give back when no value holds a line break). ``mode``: see value_strategy."""
    verb, objtype = draw(st.sampled_from(sorted(SPECS) + (QUEUE_COMMANDS if mode == "sane"
                                                          else [])))
    spec = SPECS[(verb, objtype)]
    verb_word = draw(st.sampled_from(sorted(w for w, v in mqsc.VERBS.items() if v == verb)))
    obj_word = draw(st.sampled_from(sorted(w for w, v in mqsc.OBJTYPES.items()
                                           if v == objtype)))
    tokens = [random_case(draw, verb_word), random_case(draw, obj_word)]
    cmd = Command(verb, objtype)

    def value(kw):
        return render_value(draw(value_strategy(kw, mode)), draw(st.booleans()))

    if spec.name:
        text, got = value("NAME")
        if not got:
            text, got = "NAMED", "NAMED"
        tokens[-1] += draw(st.sampled_from(["", " "])) + f"({text})"
        cmd.name = got
    keywords = list(dict.fromkeys(spec.valued + spec.bare))
    for group in spec.exclusive:
        keep = draw(st.sampled_from(group))
        keywords = [k for k in keywords if k not in group or k == keep]
    chosen = draw(st.lists(st.sampled_from(keywords), unique=True, max_size=5)) \
        if keywords else []
    for kw in chosen:
        word = random_case(draw, kw)
        gap = draw(st.sampled_from(["", " ", "  "]))
        valued = kw in spec.valued and (kw not in spec.bare or draw(st.booleans()))
        if not valued:
            tokens.append(word)
            cmd.flags.append(kw)
        elif kw == "WHERE":
            attr = draw(st.sampled_from([a for a in spec.bare if a not in ("ALL", "LOG")]))
            op = draw(st.sampled_from(WHERE_OPS))
            text, got = value("WHERE")
            tokens.append(f"{word}{gap}({random_case(draw, attr)} {op.lower()} {text})")
            cmd.where = (attr, op, got)
        elif kw in spec.lists:
            auths = ORDER + ("ALL", "NONE") if mode != "sane" else ("PUT", "GET", "BROWSE")
            items = draw(st.lists(st.sampled_from(auths + ("FLY",) * (mode != "sane")),
                                  max_size=4))
            sep = draw(st.sampled_from([",", ", ", " "]))
            tokens.append(f"{word}{gap}({sep.join(items)})")
            cmd.attrs[kw] = items
        else:
            text, got = value(kw)
            tokens.append(f"{word}{gap}({text})")
            cmd.attrs[kw] = got
    return tokens, cmd


@st.composite
def rendered(draw, command) -> tuple[list[str], Command]:
    """A command's lines: tokens separated by blanks, some lines continued with
    '+' (the next line's leading blanks dropped) or '-' (kept), comment lines
    inside the continuation."""
    tokens, cmd = draw(command)
    lines, current = [], tokens[0]
    for tok in tokens[1:]:
        how = draw(st.sampled_from(["same", "same", "plus", "minus"]))
        if how == "same":
            current += draw(st.sampled_from([" ", "  ", "\t"])) + tok
            continue
        lines.append(current + (" +" if how == "plus" else " -"))
        if draw(st.booleans()):
            lines.append(draw(st.sampled_from(["*", "* a comment", "   * (not) 'closed"])))
        current = draw(st.sampled_from(["", "   ", "\t"])) + tok
    lines.append(current)
    return lines, cmd


@st.composite
def scripts(draw, command=None) -> tuple[str, list[Command]]:
    """Several commands with blank and comment lines between them; the expected
    Commands carry their first line number."""
    command = command if command is not None else grammar_command()
    text_lines: list[str] = []
    expected = []
    for lines, cmd in draw(st.lists(rendered(command), min_size=1, max_size=4)):
        for _ in range(draw(st.integers(0, 2))):
            text_lines.append(draw(st.sampled_from(["", "   ", "* comment",
                                                    "  *DEFINE QLOCAL(X)"])))
        cmd.line = len(text_lines) + 1
        text_lines.extend(lines)
        expected.append(cmd)
    return "\n".join(text_lines) + draw(st.sampled_from(["", "\n", "\r\n"])), expected


INSERTS = ["(", ")", "'", "''", ",", " ", "+", "-", "+\n", "-\n", "\n", "*", "\x00", "\t",
           "WHERE(", "ALL", "DEFINE QLOCAL(", ")(", "\u2028", "\r"]


@st.composite
def mutated(draw, text_strategy) -> str:
    """Grammar-shaped text with a few edits: characters inserted, ranges deleted
    or doubled, the text cut short."""
    text = draw(text_strategy)
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "insert", "delete", "double", "cut"]))
        if op == "insert":
            text = text[:pos] + draw(st.sampled_from(INSERTS)) + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 8)):]
        elif op == "double":
            end = pos + draw(st.integers(1, 30))
            text = text[:end] + text[pos:end] + text[end:]
        else:
            text = text[:pos]
    return text


grammar_text = scripts().map(lambda s: s[0])
sane_text = scripts(grammar_command("sane")).map(lambda s: s[0])
soup = st.lists(st.sampled_from(list("()',+-* \n\t\x00") +
                               ["DEFINE", "DIS", "QL", "QLOCAL", "Q", "QMGR", "AUTHREC", "SET",
                                "WHERE", "ALL", "REPLACE", "PURGE", "END", "MAXDEPTH", "DESCR",
                                "FZ.Q", "..", "/", "CURDEPTH", "GT", "LK", "PING"]), max_size=60)
any_script = st.one_of(sane_text, sane_text, grammar_text, grammar_text, mutated(grammar_text),
                       mutated(sane_text), st.text(any_char, max_size=300),
                       soup.map(lambda parts: "".join(parts)))


# -- the parser alone -----------------------------------------------------------------------

def check_parsed(text: str) -> list:
    items = parse_script(text)
    n_lines = max(1, len(text.splitlines()))
    for i, item in enumerate(items):
        if isinstance(item, MqscSyntaxError):
            assert 1 <= item.first_line <= item.line <= n_lines, (item, text)
            assert item.column >= 1 and item.msgid == "HMQ8405E"
            assert item.detail and format_syntax_error(item).startswith("HMQ8405E: Syntax error")
            continue
        assert isinstance(item, Command), item
        if item.verb == "END":
            assert i == len(items) - 1                  # reading stops after END
            continue
        spec = SPECS[(item.verb, item.objtype)]
        assert bool(item.name) == bool(spec.name), item
        assert set(item.attrs) <= set(spec.valued) and set(item.flags) <= set(spec.bare)
    return items


@settings(max_examples=300, deadline=None)
@given(any_script)
@example("DEFINE QLOCAL(Q1) +")
@example("DEFINE QLOCAL('open")
@example("*\n+\n-")
@example("DIS QL(*) WHERE(")
@example("\u2028DEFINE\x85QLOCAL(Q1)")
def test_any_text_parses_to_commands_or_syntax_errors(text):
    check_parsed(text)


@settings(max_examples=300, deadline=None)
@given(scripts(grammar_command("one_line")))
def test_grammar_commands_parse_back_to_what_was_generated(script):
    text, expected = script
    got = check_parsed(text)
    assert [type(c) for c in got] == [Command] * len(expected), got
    for cmd, want in zip(got, expected, strict=True):
        assert (cmd.verb, cmd.objtype, cmd.name, cmd.attrs, cmd.flags, cmd.where, cmd.line) == \
            (want.verb, want.objtype, want.name, want.attrs, want.flags, want.where, want.line)


# -- generic names --------------------------------------------------------------------------

def _reference_match(pattern: str, name: str) -> bool:
    regex = "".join(".*" if c == "*" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.S) is not None


@settings(max_examples=500, deadline=None)
@given(st.text(st.sampled_from("AB.*"), max_size=8), st.text(st.sampled_from("AB.*"), max_size=10))
def test_generic_match_agrees_with_the_regex_it_replaced(pattern, name):
    assert generic_match(pattern, name) == _reference_match(pattern, name)


def test_generic_match_of_many_stars_takes_no_time():
    """DIS QL('******************************A') held the loop for hours: the
    pattern was one regex of '.*' per star, which backtracks exponentially (ten
    stars took seconds; thirty, the server examples below, would take years)."""
    start = time.monotonic()
    assert not generic_match("*" * 10 + "A", "SYSTEM.DEFAULT.LOCAL.QUEUE")
    assert not generic_match("*X" * 40 + "A", "X" * 200)
    assert generic_match("*" * 30 + "E", "SYSTEM.DEFAULT.LOCAL.QUEUE")
    assert time.monotonic() - start < 0.5


# -- against a queue manager ----------------------------------------------------------------

E_LINE = re.compile(r"HMQ\d{4}E: ")
MSG_LINE = re.compile(r"HMQ\d{4}[IWE]: \S")
#: how run_mqsc reports an exception that is not a harbormq error: a defect
UNEXPECTED = _error_text(RuntimeError()).split("RuntimeError")[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A queue manager server with messages of three priorities on FZ.M and an
    uncommitted put on FZ.U (a STOMP transaction left open)."""
    s = FuzzServer(tmp_path_factory.mktemp("mqscfuzz"), "QM1").start()
    s.mqsc("DEFINE QLOCAL(FZ.M) DEFPSIST(YES)\nDEFINE QLOCAL(FZ.U)")
    stomp = raw_connected(s.srv.port)
    for priority in (0, 4, 9):
        stomp.call("SEND", {"destination": "/queue/FZ.M", "priority": str(priority),
                            "persistent": "true"}, b"m")
    stomp.call("BEGIN", {"transaction": "t1"})
    stomp.call("SEND", {"destination": "/queue/FZ.U", "transaction": "t1"}, b"uncommitted")
    yield s
    stomp.close()
    try:
        s.console_clean()
    finally:
        s.stop()


def check_script(server: FuzzServer, text: str, cont: bool) -> str:
    """Run ``text`` on the server; check the reply, its output, and the files."""
    before = server.outside()
    top_before = {p.name for p in server.srv.qm_dir.iterdir()}
    console = server.console_size()
    reply = server.mqsc(text, cont)
    out = reply["output"]
    assert UNEXPECTED not in out, f"a command failed with an unexpected exception:\n{out}"
    lines = out.splitlines()
    assert lines[0] == "Starting MQSC for queue manager QM1."
    assert re.search(r"(No|One|\d+) MQSC commands? read\.", out), out
    for line in lines:
        if line.startswith("HMQ"):
            assert MSG_LINE.match(line), line
    assert reply["errors"] == sum(1 for line in lines if E_LINE.match(line)), out
    assert reply["ok"] == (reply["errors"] == 0)
    server.console_clean(console)
    # nothing outside the queue manager's directories; inside, a store per queue
    assert server.outside() == before, f"files appeared or changed outside for {text!r}"
    assert {p.name for p in server.srv.qm_dir.iterdir()} <= top_before | {"authrecs.json"}
    shown = re.findall(r"^   QUEUE\((.*?)\)", server.mqsc("DISPLAY QUEUE(*)")["output"], re.M)
    stores = sorted(p.name for p in (server.srv.qm_dir / "queues").iterdir())
    assert stores == sorted(file_name(n) for n in shown), text
    for p in server.log_dir.iterdir():
        assert re.fullmatch(r"S\d{7}\.LOG|control\.[12]", p.name), p
    return out


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(any_script, st.booleans())
@example("DIS QL('" + "*" * 30 + "A')", False)
@example("DIS QL(*) WHERE(DESCR LK '" + "*" * 30 + "A')", True)
@example("DIS CONN(" + "*" * 30 + "Z)", False)
def test_any_script_against_a_queue_manager(server, text, cont):
    out = check_script(server, text, cont)
    for msgid in sorted(set(re.findall(r"^(HMQ\d{4}[IWE])", out, re.M))):
        event(msgid)          # what the scripts reached (--hypothesis-show-statistics)
    assert "HMQ8415I" in server.mqsc("PING QMGR")["output"]


def test_hostile_names_in_every_command_stay_inside(server):
    """Every hostile name in every place a name goes, one after another."""
    for name in HOSTILE_NAMES:
        q = render_value(name, True)[0]
        commands = [
            f"DEFINE QLOCAL({q}) DESCR({q}) BOQNAME({q})", f"DEFINE QLOCAL({q})",
            f"DEFINE QLOCAL({q}) REPLACE LIKE({q})", f"ALTER QLOCAL({q}) MAXDEPTH(7)",
            f"DISPLAY QLOCAL({q}) ALL", f"DISPLAY QSTATUS({q}) TYPE(HANDLE)",
            f"DISPLAY CONN({q})", f"STOP CONN({q})", f"ALTER QMGR DEADQ({q})",
            f"CLEAR QLOCAL({q})", f"DELETE QLOCAL({q}) PURGE",
            f"SET AUTHREC PROFILE({q}) OBJTYPE(QUEUE) PRINCIPAL({q}) AUTHADD(PUT)",
            f"DISPLAY AUTHREC PROFILE({q}) PRINCIPAL({q})",
            f"DELETE AUTHREC PROFILE({q}) OBJTYPE(QUEUE) GROUP({q})"]
        check_script(server, "\n".join(commands), True)
    assert "HMQ8415I" in server.mqsc("PING QMGR")["output"]
