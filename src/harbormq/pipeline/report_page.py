"""The ``report`` job's page for people: its plots and ``index.html``.

Takes the report the job computed (a plain dict, the one written as
``report.json``) and writes PNG plots and a styled HTML page: a summary first
(records, units of work, queues, topics, the time span in wall-clock time),
then log retention, units of work, queues and topics. Every plot has a title
and labelled axes with units; times are wall-clock (UTC), sizes and durations
in the unit that suits them. The page links the JSON rather than showing it.

It holds no Spark (the aggregation is ``report.py``'s) and reads no log.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from pathlib import Path

NS_PER_S = 1_000_000_000

_BYTE_UNITS = ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1, "bytes"))
_DURATION_UNITS = ((86400, "days"), (3600, "hours"), (60, "minutes"), (1, "seconds"),
                   (1e-3, "ms"))


def byte_unit(largest: float) -> tuple[float, str]:
    """The divisor and name of the decimal unit that shows ``largest`` bytes best."""
    for size, name in _BYTE_UNITS:
        if largest >= size:
            return size, name
    return 1, "bytes"


def duration_unit(largest_s: float) -> tuple[float, str]:
    """The divisor and name of the unit that shows ``largest_s`` seconds best."""
    for size, name in _DURATION_UNITS:
        if largest_s >= size:
            return size, name
    return 1e-3, "ms"


def human_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    size, name = byte_unit(abs(n))
    return f"{n:,.0f} bytes" if size == 1 else f"{n / size:,.1f} {name}"


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    size, name = duration_unit(abs(seconds))
    return f"{seconds / size:,.{0 if size == 1e-3 else 1}f} {name}"


def clock(ts_ns: int | None) -> datetime | None:
    return None if ts_ns is None else datetime.fromtimestamp(ts_ns / NS_PER_S, tz=UTC)


def clock_text(ts_ns: int | None) -> str:
    t = clock(ts_ns)
    return "–" if t is None else t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def summary(report: dict) -> dict:
    """The figures the page opens with (also kept in report.json as ``summary``)."""
    t0, t1 = report["first_ts_ns"], report["last_ts_ns"]
    span_s = (t1 - t0) / NS_PER_S if t0 is not None and t1 is not None else None
    outcomes = report["uows"]["by_outcome"]
    return {"records": report["records"],
            "units_of_work": sum(outcomes.values()),
            "units_of_work_by_outcome": outcomes,
            "queues": len(report["queues"]),
            "topics": len(report.get("topics", {})),
            "checkpoints": len(report["retention"]),
            "first_time": clock_text(t0), "last_time": clock_text(t1),
            "span_seconds": span_s, "span": human_duration(span_s)}


def write_page(report: dict, out: Path) -> list[str]:
    """Write the plots and index.html into ``out``; the files written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = _Plots(plt, out)
    retention = plots.retention(report["retention"])
    uows = plots.uow_durations(report["uows"]["duration_ms_histogram_log10"])
    span = _Span(report)
    queue_files = {name: plots.queue(name, s, span)
                   for name, s in sorted(report["queues"].items())}
    (out / "index.html").write_text(_page(report, retention, uows, queue_files))
    return [*plots.written, "index.html"]


class _Plots:
    """Each plot a PNG of its own, titled, axes labelled with units."""

    def __init__(self, plt, out: Path):
        self.plt, self.out, self.written = plt, out, []

    def _save(self, fig, name: str) -> str:
        fig.tight_layout()
        fig.savefig(self.out / name, dpi=96)
        self.plt.close(fig)
        self.written.append(name)
        return name

    def _clock_axis(self, ax) -> None:
        import matplotlib.dates as mdates
        locator = mdates.AutoDateLocator(tz=UTC)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))
        ax.set_xlabel("time (UTC)")
        ax.grid(alpha=0.3)

    def retention(self, checkpoints: list[dict]) -> str:
        fig, ax = self.plt.subplots(figsize=(9, 3.6))
        needed = [c["log_bytes_needed"] for c in checkpoints]
        size, unit = byte_unit(max(needed, default=0))
        ax.plot([clock(c["ts_ns"]) for c in checkpoints], [n / size for n in needed],
                marker="o", color="#1f6feb")
        ax.set_ylim(bottom=0)
        ax.set_ylabel(f"log needed for restart ({unit})")
        ax.set_title("Log retention: log needed for restart at each checkpoint")
        self._clock_axis(ax)
        if not checkpoints:
            ax.text(0.5, 0.5, "no checkpoint in this log", ha="center", transform=ax.transAxes)
        return self._save(fig, "retention.png")

    def uow_durations(self, histogram: dict) -> str:
        fig, ax = self.plt.subplots(figsize=(9, 3.6))
        # bucket b holds durations from 10**b to 10**(b+1) milliseconds
        labels = [f"{human_duration(10 ** int(b) / 1e3)} – "
                  f"{human_duration(10 ** (int(b) + 1) / 1e3)}" for b in histogram]
        ax.bar(labels, list(histogram.values()), color="#2da44e")
        ax.set_xlabel("duration from first to last record (log10 buckets)")
        ax.set_ylabel("units of work (count)")
        ax.set_title("Durations of the units of work that ended")
        ax.grid(axis="y", alpha=0.3)
        if not histogram:
            ax.text(0.5, 0.5, "no unit of work ended in this log", ha="center",
                    transform=ax.transAxes)
        return self._save(fig, "uow_durations.png")

    def queue(self, name: str, s: dict, span: _Span) -> str:
        series = span.dense(s)
        times = span.times()
        ages = [a for a in series["oldest_age_s"] if a == a]
        age_size, age_unit = duration_unit(max(ages, default=0))
        fig, axes = self.plt.subplots(3, 1, figsize=(9, 7.5), sharex=True)
        axes[0].step(times, series["puts_per_minute"], where="post", label="puts",
                     color="#1f6feb")
        axes[0].step(times, series["gets_per_minute"], where="post", label="gets",
                     color="#cf222e")
        axes[0].set_ylabel("messages per minute")
        axes[0].set_title(f"Queue {name}: traffic per minute "
                          f"(in buckets of {human_duration(span.width_s)})")
        axes[0].legend(loc="upper right")
        axes[1].step(times, series["depth"], where="post", color="#8250df")
        axes[1].set_ylabel("depth (messages)")
        axes[1].set_title("Depth at the end of each bucket")
        axes[2].step(times, [a / age_size for a in series["oldest_age_s"]], where="post",
                     color="#bf8700")
        axes[2].set_ylabel(f"oldest message age ({age_unit})")
        axes[2].set_title("Age of the oldest message at the end of each bucket")
        for ax in axes:
            self._clock_axis(ax)
            ax.set_xlim(times[0], times[-1])
            ax.set_ylim(bottom=0)
        for ax in axes[:2]:
            ax.set_xlabel("")
        return self._save(fig, f"queue_{safe_name(name)}.png")


class _Span:
    """The log's buckets of clock time, every one of them (a queue's series lists
    only those with traffic or messages)."""

    def __init__(self, report: dict):
        self.t0 = report["first_ts_ns"]
        self.width_s = report["bucket_seconds"]
        width_ns = int(self.width_s * NS_PER_S)
        self.count = (report["last_ts_ns"] - self.t0) // width_ns + 1
        self.width_ns = width_ns

    def times(self) -> list[datetime]:
        """Each bucket's start, and the end of the last (so a step shows it)."""
        return [clock(self.t0 + b * self.width_ns) for b in range(self.count + 1)]

    def dense(self, s: dict) -> dict:
        """The series on every bucket: no traffic is 0 per minute, no message depth 0
        and no age (NaN, not drawn); the last value repeated for the closing step."""
        at = {b: i for i, b in enumerate(s["buckets"])}
        out = {}
        for key, missing in (("puts_per_minute", 0), ("gets_per_minute", 0), ("depth", 0),
                             ("oldest_age_s", float("nan"))):
            values = [s[key][at[b]] if b in at else missing for b in range(self.count)]
            values = [missing if v is None else v for v in values]
            out[key] = values + values[-1:]
        return out


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


_STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
 background:#f6f8fa;color:#1f2328}
header{background:#24292f;color:#fff;padding:18px 32px}
header h1{margin:0;font-size:22px} header p{margin:4px 0 0;color:#c9d1d9}
header a{color:#9ecbff}
main{max-width:1100px;margin:0 auto;padding:16px 32px 48px}
section{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:16px 20px;
 margin:16px 0}
h2{margin:0 0 10px;font-size:18px}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{flex:1 1 150px;background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:12px 16px}
.card .figure{font-size:24px;font-weight:600} .card .label{color:#57606a;font-size:13px}
table{border-collapse:collapse;width:100%;margin:8px 0}
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #d8dee4}
th{background:#f6f8fa;font-weight:600} td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;height:auto;display:block;margin:8px 0}
.muted{color:#57606a}
"""


def _table(headers: list[str], rows: list[list], numeric: set[int] = frozenset()) -> str:
    if not rows:
        return "<p class='muted'>none</p>"
    head = "".join(f"<th{' class=n' if i in numeric else ''}>{html.escape(h)}</th>"
                   for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td{' class=n' if i in numeric else ''}>{html.escape(str(v))}</td>"
                         for i, v in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _page(report: dict, retention: str, uows: str, queue_files: dict[str, str]) -> str:
    s = summary(report)
    e = html.escape
    cards = "".join(
        f"<div class='card' data-figure='{key}'><div class='figure'>{e(str(value))}</div>"
        f"<div class='label'>{e(label)}</div></div>"
        for key, value, label in (
            ("records", f"{s['records']:,}", "log records"),
            ("units_of_work", f"{s['units_of_work']:,}", "units of work"),
            ("queues", f"{s['queues']:,}", "queues with traffic"),
            ("topics", f"{s['topics']:,}", "topics published to"),
            ("span", s["span"], "time span of the log")))
    cps = report["retention"]
    needed = [c["log_bytes_needed"] for c in cps]
    retention_text = (f"{len(cps)} checkpoint(s); log needed for restart: at most "
                      f"{human_bytes(max(needed))}, at the last checkpoint "
                      f"{human_bytes(needed[-1])}." if cps else "No checkpoint in this log.")
    u = report["uows"]
    q = u["duration_ms_quantiles"]
    quantiles = [[k, human_duration(q[k] / 1e3)] for k in ("p50", "p90", "p99", "max") if k in q]
    longest = [[r["uow_id"], human_duration(r["duration_ms"] / 1e3), r["outcome"],
                r["operations"]] for r in u["longest"]]
    queue_rows = []
    for name, qs in sorted(report["queues"].items()):
        ages = [a for a in qs["oldest_age_s"] if a is not None]
        queue_rows.append([name, f"{qs.get('puts_total', 0):,}", f"{qs.get('gets_total', 0):,}",
                           f"{max(qs['depth'], default=0):,}",
                           f"{qs['depth'][-1] if qs['depth'] else 0:,}",
                           human_duration(max(ages)) if ages else "–"])
    topic_rows = [[t, f"{v['publications']:,}", f"{v['deliveries']:,}", v["queues_reached"],
                   human_bytes(v["body_bytes"]), clock_text(v["first_ns"]),
                   clock_text(v["last_ns"])] for t, v in report.get("topics", {}).items()]
    queue_plots = "".join(
        f"<h3>{e(name)}</h3><img src='{e(f)}' alt='traffic, depth and oldest message age of "
        f"queue {e(name)} over time'>" for name, f in queue_files.items())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>harbormq log report</title><style>{_STYLE}</style></head>
<body><header><h1>harbormq log report</h1>
<p id="span">{e(s['first_time'])} to {e(s['last_time'])} ({e(s['span'])}) ·
<a href="report.json" id="json-link">report.json</a> has every figure</p></header>
<main>
<section id="summary"><h2>Summary</h2><div class="cards">{cards}</div>
<p class="muted">{s['checkpoints']} checkpoint(s); units of work by outcome:
{e(', '.join(f'{k} {v:,}' for k, v in sorted(s['units_of_work_by_outcome'].items())) or 'none')}.
</p></section>
<section id="retention"><h2>Log retention</h2><p>{e(retention_text)}</p>
<img src="{retention}" alt="log needed for restart at each checkpoint over time"></section>
<section id="uows"><h2>Units of work</h2>
{_table(["outcome", "units of work"], [[k, f"{v:,}"] for k, v in sorted(u["by_outcome"].items())],
        {1})}
<h3>Durations of those that ended</h3>{_table(["quantile", "duration"], quantiles, {1})}
<img src="{uows}" alt="histogram of unit of work durations">
<h3>The longest</h3>
{_table(["unit of work", "duration", "outcome", "operations"], longest, {0, 1, 3})}
<p>In doubt at the end of the log: {e(', '.join(map(str, u['in_doubt_at_end'])) or 'none')}.
In flight at the end: {e(', '.join(map(str, u['in_flight_at_end'])) or 'none')}.</p>
</section>
<section id="queues"><h2>Queues</h2>
{_table(["queue", "puts", "gets", "highest depth", "depth at the end", "oldest message age"],
        queue_rows, {1, 2, 3, 4, 5})}
{queue_plots}</section>
<section id="topics"><h2>Topics</h2>
{_table(["topic string", "publications", "deliveries", "queues reached", "body bytes",
         "first", "last"], topic_rows, {1, 2, 3, 4})}</section>
</main></body></html>
"""
