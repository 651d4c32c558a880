// harbormq console: reads /console/api/* as the logged-in user and runs every
// action as one MQSC command through MQ's REST runCommand, showing its answer.
// Plain JavaScript, no build step, no library.
"use strict";

const AUTH_KEY = "harbormq-console-auth";
const state = {
  auth: sessionStorage.getItem(AUTH_KEY), qmgr: null, view: "overview", arg: null,
  timer: null, pollMs: 2000, queues: {offset: 0, limit: 50, filter: "", sort: "name"},
  browse: {cursors: [""], limit: 50},
};

const $ = (id) => document.getElementById(id);
const esc = (v) => String(v ?? "").replace(/[&<>"']/g,
  (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const num = (v) => (v === "" || v === null || v === undefined) ? "" :
  (typeof v === "number" ? v.toLocaleString("en") : esc(v));

function seconds(s) {
  if (s === "" || s === null || s === undefined) return "";
  s = Number(s);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} days`;
}
const clock = (ns) => ns ? new Date(Number(ns) / 1e6).toISOString()
  .replace("T", " ").replace("Z", " UTC") : "";

class HttpError extends Error {
  constructor(status, message, body) { super(message); this.status = status; this.body = body; }
}

function errorText(body, status) {
  if (body && body.error && body.error[0]) return body.error.map((e) => e.message).join("\n");
  return `HTTP ${status}`;
}

async function api(path) {
  const r = await fetch(path, {headers: {"Authorization": state.auth || ""},
                               cache: "no-store"});
  const body = await r.json().catch(() => null);
  if (!r.ok) throw new HttpError(r.status, errorText(body, r.status), body);
  return body;
}

// -- actions: one MQSC command each, through runCommand ------------------------------
async function runCommand(command) {
  const entry = document.createElement("li");
  entry.className = "action";
  entry.dataset.command = command;
  entry.innerHTML = `<code>${esc(command)}</code> <span class="muted">running…</span>`;
  $("activity").prepend(entry);
  let status = 0, body = null;
  try {
    const r = await fetch(`/ibmmq/rest/v2/admin/action/qmgr/${encodeURIComponent(state.qmgr)}/mqsc`, {
      method: "POST",
      headers: {"Authorization": state.auth || "", "Content-Type": "application/json",
                "ibm-mq-rest-csrf-token": "harbormq-console"},
      body: JSON.stringify({type: "runCommand", parameters: {command}})});
    status = r.status;
    body = await r.json().catch(() => null);
  } catch (e) {
    body = {error: [{message: String(e)}]};
  }
  let cc, lines;
  if (body && body.commandResponse) {
    cc = body.overallCompletionCode;
    lines = body.commandResponse.flatMap((c) => c.text || []);
    entry.dataset.reason = body.overallReasonCode;
    const reasons = body.commandResponse.map((c) => c.reasonCode).filter((x) => x);
    if (reasons.length) entry.dataset.reason = reasons[0];
  } else {
    cc = 2;
    lines = [errorText(body, status)];
    entry.dataset.reason = body && body.error && body.error[0] ? body.error[0].reasonCode : "";
  }
  entry.dataset.cc = cc;
  entry.dataset.status = status;
  entry.innerHTML = `<code>${esc(command)}</code> <span class="${cc === 0 ? "ok" : "error"}">` +
    `${cc === 0 ? "done" : "failed"} (HTTP ${status}, completion ${cc}, reason ` +
    `${esc(entry.dataset.reason)})</span><pre>${esc(lines.join("\n"))}</pre>`;
  refresh();
  return entry;
}

// a danger button asks for a second click within CONFIRM_MS (kept across re-reads)
const CONFIRM_MS = 6000;
function actionButtons(actions) {
  const c = state.confirming;
  const pending = c && Date.now() - c.at < CONFIRM_MS ? c.command : null;
  return actions.map((a) => {
    const asking = a.danger && pending === a.command;
    return `<button type="button" class="${a.danger ? "danger" : ""}${asking ? " confirming" :
      ""}" data-command="${esc(a.command)}" data-confirm="${a.danger ? "1" : ""}">` +
      `${asking ? "Confirm: " : ""}${esc(a.label)}</button>`;
  }).join("");
}

document.addEventListener("click", (ev) => {
  const b = ev.target.closest("button[data-command]");
  if (!b) return;
  const command = b.dataset.command;
  if (b.dataset.confirm && !b.classList.contains("confirming")) {
    state.confirming = {command, at: Date.now()};
    b.classList.add("confirming");
    b.textContent = `Confirm: ${b.textContent}`;
    return;
  }
  state.confirming = null;
  runCommand(command);
});

// -- tables ---------------------------------------------------------------------------
function table(id, columns, rows, actions) {
  if (!rows.length) return `<p class="muted" id="${id}-empty">none</p>`;
  const head = columns.map((c) => `<th class="${c.num ? "n" : ""}">${esc(c.label)}</th>`)
    .join("") + (actions ? "<th>actions</th>" : "");
  const body = rows.map((r) => `<tr data-name="${esc(r[columns[0].key])}">` +
    columns.map((c) => `<td class="${c.num ? "n" : ""} ${c.cls || ""}" data-key="${c.key}">` +
      `${c.fmt ? c.fmt(r[c.key], r) : (c.num ? num(r[c.key]) : esc(r[c.key]))}</td>`).join("") +
    (actions ? `<td>${actionButtons(actions(r))}</td>` : "") + "</tr>").join("");
  return `<table id="${id}"><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

const card = (key, value, label) => `<div class="card" data-figure="${key}">` +
  `<div class="figure">${value}</div><div class="label">${esc(label)}</div></div>`;
const badge = (s) => `<span class="state ${esc(s)}">${esc(s)}</span>`;
const failed = (section) => section && section.error ?
  `<p class="error">${esc(section.error)}</p>` : null;
const quoted = (name) => `'${String(name).replace(/'/g, "''")}'`;

// -- the views ------------------------------------------------------------------------
const views = {
  async overview() {
    const d = await api("/console/api/overview");
    const s = d.status.error ? {} : d.status;
    const log = d.log.error ? {} : d.log;
    ensureToolbar("overview", () => `<form class="mqsc" id="mqsc-form"><label for=` +
      `"mqsc-command">MQSC</label><input id="mqsc-command" placeholder="DISPLAY QMSTATUS ALL" ` +
      `autocomplete="off" size="60"><button type="submit">Run</button></form>`, () => {});
    return `<section id="qmstatus"><h2>Queue manager ${esc(d.qmgr)}</h2><div class="cards">` +
      card("status", badge(s.status || "?"), "status") +
      card("conns", num(s.conns), "connections") +
      card("started", esc(`${s.startda || ""} ${s.startti || ""}`), "started") +
      card("rectime", seconds(d.restart_estimate_s), "estimated restart time") +
      card("in_doubt", num(d.in_doubt.length), "units of work in doubt") +
      `</div>${failed(d.status) || ""}</section>` +
      `<section id="log"><h2>Recovery log <span class="muted">DISPLAY QMSTATUS ALL, ` +
      `DISPLAY LOG</span></h2><div class="cards">` +
      card("logtype", esc(s.logtype), "log type") +
      card("currlog", esc(s.currlog), "current extent") +
      card("reclog", esc(s.reclog), "oldest extent restart needs") +
      card("recsz", esc(s.recsz), "MB of log restart needs") +
      card("medialog", esc(s.medialog || "–"), "oldest extent media recovery needs") +
      card("mediasz", esc(s.mediasz || "–"), "MB of log media recovery needs") +
      card("loginuse", `${num(s.loginuse)} %`, "primary log in use") +
      card("archive_backlog", num(d.archive_backlog.length), "extents waiting for archive") +
      card("copies", num(d.dual_log.copies), d.dual_log.copies === 2 ? "log copies (dual)" :
        "log copy (single)") +
      `</div><p>Restart point LSN ${num(s.reclsn)}, media point LSN ` +
      `${s.medialsn === "" ? "– (circular log)" : num(s.medialsn)}, ` +
      `current LSN ${num(s.currlsn)}, last checkpoint LSN ${num(s.chkptlsn)}. ` +
      `Replay rate ${num(d.replay_rate_mb_s)} MB/s (${d.replay_rate_measured ? "measured" :
        "assumed"}). Oldest log entry needed: ${esc(d.oldest_entry_time)}.</p>` +
      `<p id="restart-pin"><b>What holds the restart point:</b> ${esc(d.restart_pin)}</p>` +
      `<h3>What holds the media recovery point</h3>` +
      table("media-pins", [{key: "object", label: "object"},
        {key: "replay_from", label: "replays from LSN", num: true},
        {key: "since", label: "since"}, {key: "why", label: "why"}], d.media_pinned_by) +
      `<p>Log path ${esc(d.dual_log.path)}${d.dual_log.dual_path ?
        `, dual copy ${esc(d.dual_log.dual_path)}` : ""}; archive to ` +
      `${esc(log.archpath || "–")}; log management ${esc(log.logmgmt || "–")}.</p>` +
      `<h3>Extents</h3>` +
      table("extents", [{key: "extent", label: "extent"}, {key: "status", label: "state"},
        {key: "needed", label: "needed for"}, {key: "archived", label: "archived"},
        {key: "deleted", label: "deleted"}, {key: "ondisk", label: "on disk"},
        {key: "firstlsn", label: "first LSN", num: true},
        {key: "endlsn", label: "end LSN", num: true}], d.extents) +
      "</section>";
  },

  async queues() {
    const q = state.queues;
    ensureToolbar("queues", () =>
      `<input id="queue-filter" placeholder="filter: part of a name, or PREFIX*" ` +
      `value="${esc(q.filter)}"> <select id="queue-sort"><option value="name">by name</option>` +
      `<option value="depth">deepest first</option></select> <button type="button" ` +
      `id="queue-prev">◀ previous</button><span id="queue-range"></span><button ` +
      `type="button" id="queue-next">next ▶</button>`, wireQueueToolbar);
    const d = await api(`/console/api/queues?offset=${q.offset}&limit=${q.limit}` +
                        `&sort=${q.sort}&filter=${encodeURIComponent(q.filter)}`);
    const last = Math.min(d.offset + d.limit, d.total);
    $("queue-range").textContent = d.total ?
      ` ${(d.offset + 1).toLocaleString("en")}–${last.toLocaleString("en")} of ` +
      `${d.total.toLocaleString("en")} ` : " no queue ";
    $("queue-range").dataset.total = d.total;
    $("queue-prev").disabled = d.offset === 0;
    $("queue-next").disabled = last >= d.total;
    return table("queue-table", [
      {key: "queue", label: "queue", fmt: (v) =>
        `<a href="#queue/${encodeURIComponent(v)}">${esc(v)}</a>`},
      {key: "curdepth", label: "depth", num: true},
      {key: "maxdepth", label: "max depth", num: true},
      {key: "uncom", label: "uncommitted", num: true},
      {key: "msgage", label: "oldest message", num: true, fmt: (v) => seconds(v)},
      {key: "rate_per_s", label: "depth change /s", num: true,
       fmt: (v) => v === null ? "…" : num(v)},
      {key: "ipprocs", label: "getters", num: true},
      {key: "opprocs", label: "putters", num: true},
      {key: "lputtime", label: "last put", fmt: (v, r) => esc(`${r.lputdate} ${v}`)},
      {key: "lgettime", label: "last get", fmt: (v, r) => esc(`${r.lgetdate} ${v}`)},
    ], d.queues, (r) => [
      {label: "Clear", command: `CLEAR QLOCAL(${quoted(r.queue)})`, danger: true}]);
  },

  async queue(name) {
    const b = state.browse;
    const cursor = b.cursors[b.cursors.length - 1];
    ensureToolbar(`queue/${name}`, () =>
      `<a href="#queues">◀ queues</a> <b>Messages on ${esc(name)}</b> <button type="button" ` +
      `id="browse-prev">◀ previous page</button><span id="browse-page"></span><button ` +
      `type="button" id="browse-next">next page ▶</button>`, wireBrowseToolbar);
    const d = await api(`/console/api/queues/${encodeURIComponent(name)}/messages?limit=` +
                        `${b.limit}&after=${cursor}`);
    b.next = d.next;
    const first = (b.cursors.length - 1) * b.limit;
    $("browse-page").textContent = ` messages ${(first + (d.messages.length ? 1 : 0))
      .toLocaleString("en")}–${(first + d.messages.length).toLocaleString("en")} of ` +
      `${d.depth.toLocaleString("en")} `;
    $("browse-prev").disabled = b.cursors.length === 1;
    $("browse-next").disabled = !d.next;
    d.messages.forEach((m, i) => { m.position = first + i + 1; });
    return table("message-table", [
      {key: "position", label: "#", num: true},
      {key: "msg_id", label: "message id", cls: "body"},
      {key: "priority", label: "priority", num: true},
      {key: "persistent", label: "persistent", fmt: (v) => v ? "yes" : "no"},
      {key: "put_time_ns", label: "put", fmt: (v) => esc(clock(v))},
      {key: "age_s", label: "age", num: true, fmt: (v) => seconds(v)},
      {key: "size", label: "bytes", num: true},
      {key: "backout_count", label: "backouts", num: true},
      {key: "body", label: "body", cls: "body", fmt: (v, m) => esc(v) +
        (m.body_truncated ? "…" : "") + (m.body_encoding === "hex" ? " (hex)" : "")},
    ], d.messages);
  },

  async connections() {
    const d = await api("/console/api/connections");
    ensureToolbar("", () => "", () => {});
    const uows = Array.isArray(d.uows) ? d.uows : [];
    return `<section><h2>Connections <span class="muted">DISPLAY CONN(*) ALL</span></h2>` +
      (failed(d.connections) || table("conn-table", [
        {key: "conn", label: "connection"}, {key: "conname", label: "from"},
        {key: "userid", label: "user"}, {key: "appltag", label: "application"},
        {key: "appltype", label: "type"}, {key: "channel", label: "channel"},
        {key: "connstti", label: "connected", fmt: (v, r) => esc(`${r.connstda} ${v}`)},
        {key: "uowstate", label: "unit of work", fmt: (v) => badge(v)},
        {key: "uowid", label: "its id"}], d.connections,
        (r) => [{label: "Stop", command: `STOP CONN(${r.conn})`, danger: true}])) +
      `</section><section><h2>Units of work <span class="muted">DISPLAY UOW(*)</span></h2>` +
      (failed(d.uows) || table("uow-table", [
        {key: "uowid", label: "unit of work", num: true},
        {key: "state", label: "state", fmt: (v) => badge(v)},
        {key: "owner", label: "owner"}, {key: "firstlsn", label: "first LSN", num: true},
        {key: "lastlsn", label: "last LSN", num: true},
        {key: "uowlogti", label: "first logged", fmt: (v, r) => esc(`${r.uowlogda} ${v}`)}],
        uows, (r) => r.state === "PREPARED" ? [
          {label: "Commit", command: `RESOLVE UOW(${r.uowid}) ACTION(COMMIT)`},
          {label: "Back out", command: `RESOLVE UOW(${r.uowid}) ACTION(BACKOUT)`,
           danger: true}] : [])) + "</section>";
  },

  async channels() {
    const d = await api("/console/api/channels");
    ensureToolbar("", () => "", () => {});
    const status = {};
    for (const s of (Array.isArray(d.status) ? d.status : [])) status[s.channel] = s;
    const rows = (Array.isArray(d.channels) ? d.channels : []).map((c) =>
      ({...c, ...(status[c.channel] || {status: "INACTIVE"})}));
    return `<section><h2>Channels <span class="muted">DISPLAY CHANNEL(*), DISPLAY ` +
      `CHSTATUS(*) ALL</span></h2>` + (failed(d.channels) || "") +
      (failed(d.status) || "") + table("channel-table", [
        {key: "channel", label: "channel"}, {key: "chltype", label: "type"},
        {key: "status", label: "status", fmt: (v) => badge(v)},
        {key: "conname", label: "connection"}, {key: "xmitq", label: "transmission queue"},
        {key: "indoubt", label: "in doubt"},
        {key: "lstseqno", label: "last sequence", num: true},
        {key: "curseqno", label: "current sequence", num: true},
        {key: "msgs", label: "messages", num: true},
        {key: "batches", label: "batches", num: true}], rows,
        (r) => r.chltype === "SDR" || r.chltype === "RCVR" ? [
          {label: "Start", command: `START CHANNEL(${quoted(r.channel)})`},
          {label: "Stop", command: `STOP CHANNEL(${quoted(r.channel)})`, danger: true},
          ...(r.indoubt === "YES" ? [
            {label: "Resolve: commit", command:
              `RESOLVE CHANNEL(${quoted(r.channel)}) ACTION(COMMIT)`},
            {label: "Resolve: back out", command:
              `RESOLVE CHANNEL(${quoted(r.channel)}) ACTION(BACKOUT)`, danger: true}] : [])] :
          []) + "</section>";
  },

  async topics() {
    const d = await api("/console/api/topics");
    ensureToolbar("", () => "", () => {});
    return `<section><h2>Topics <span class="muted">DISPLAY TOPIC(*)</span></h2>` +
      (failed(d.topics) || table("topic-table", [{key: "topic", label: "topic object"},
        {key: "topicstr", label: "topic string"}, {key: "descr", label: "description"}],
        d.topics)) +
      `</section><section><h2>Subscriptions <span class="muted">DISPLAY SUB(*) ALL</span>` +
      `</h2>` + (failed(d.subscriptions) || table("sub-table", [
        {key: "sub", label: "subscription"}, {key: "topicstr", label: "topic string"},
        {key: "dest", label: "destination"}, {key: "subtype", label: "type"},
        {key: "durable", label: "durable"}, {key: "selector", label: "selector"}],
        d.subscriptions, (r) => [{label: "Delete", command:
          `DELETE SUB(${quoted(r.sub)})`, danger: true}])) + "</section>";
  },
};

function ensureToolbar(key, html, wire) {
  const bar = $("toolbar");
  if (bar.dataset.key === key) return;
  bar.dataset.key = key;
  bar.innerHTML = html();
  wire();
}

function wireQueueToolbar() {
  const q = state.queues;
  $("queue-sort").value = q.sort;
  let typing = null;
  $("queue-filter").addEventListener("input", (ev) => {
    clearTimeout(typing);
    typing = setTimeout(() => { q.filter = ev.target.value; q.offset = 0; refresh(); }, 250);
  });
  $("queue-sort").addEventListener("change", (ev) => {
    q.sort = ev.target.value; q.offset = 0; refresh();
  });
  $("queue-prev").addEventListener("click", () => {
    q.offset = Math.max(0, q.offset - q.limit); refresh();
  });
  $("queue-next").addEventListener("click", () => { q.offset += q.limit; refresh(); });
}

function wireBrowseToolbar() {
  const b = state.browse;
  $("browse-prev").addEventListener("click", () => {
    if (b.cursors.length > 1) b.cursors.pop();
    refresh();
  });
  $("browse-next").addEventListener("click", () => {
    if (b.next) b.cursors.push(b.next);
    refresh();
  });
}

function setQmgr(name) {
  if (name && state.qmgr !== name) {
    state.qmgr = name;
    $("qmgr-name").textContent = name;
    document.title = `harbormq console: ${name}`;
  }
}

// -- reading, and reading again ------------------------------------------------------------
let reading = false;
async function refresh() {
  clearTimeout(state.timer);
  if (!state.auth) { showLogin(""); return; }
  if (reading) { state.again = true; return; }
  reading = true;
  const view = state.view;
  try {
    if (!state.qmgr) {
      const session = await api("/console/api/session");
      setQmgr(session.qmgr);
      $("who").textContent = session.user;
      state.pollMs = session.poll_s * 1000;
    }
    const html = await views[view](state.arg);
    if (view === state.view) {
      $("view").innerHTML = html;
      $("view").dataset.view = view;
      // since the navigation began: the first view drawn (benchmarks/bench_console.py)
      window.harbormqFirstView = window.harbormqFirstView || performance.now();
      $("view-error").hidden = true;
      $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
      $("updated").dataset.at = Date.now();
    }
  } catch (e) {
    if (e.status === 401) { showLogin(e.message); reading = false; return; }
    if (e.status === 503 && e.body && e.body.restart) {
      showStarting(e.body.restart);
      reading = false;
      state.timer = setTimeout(refresh, STARTING_POLL_MS);
      return;
    }
    $("view-error").hidden = false;
    $("view-error").textContent = e.message;
    if (e.status === 403) $("view").innerHTML = "";
  }
  reading = false;
  if (state.again) { state.again = false; refresh(); return; }
  state.timer = setTimeout(refresh, state.pollMs);
}

// -- while the queue manager starts: every view shows the restart (http/starting.py) --
const STARTING_POLL_MS = 1000;
function showStarting(d) {
  const failedStart = d.state === "failed";
  const unit = d.unit === "bytes" ? "MB" : d.unit;
  const amount = (v) => d.unit === "bytes" ? (v / 1e6).toFixed(1) : num(v);
  const phases = d.phases.map((p) => ({...p, seconds: p.state === "waiting" ? "" :
    seconds(p.seconds)}));
  $("view").innerHTML = `<section id="starting" data-state="${esc(d.state)}" ` +
    `data-phase="${esc(d.phase || "")}"><h2>Queue manager ${esc(d.qmgr)} ` +
    `${badge(failedStart ? "FAILED" : "STARTING")}</h2>` +
    (failedStart ? `<p class="error" id="starting-error">The start failed: ${esc(d.error)}` +
      `</p>` : `<p>Restart recovery is running: the queue manager's objects, queues and ` +
      `units of work come back from the log. The other pages open once it runs; ` +
      `STOMP and the admin socket open then too.</p>`) +
    `<div class="cards">` +
    card("phase", esc(d.phase || "–") + (d.phase_number ? ` <span class="muted">(phase ` +
      `${d.phase_number} of 6)</span>` : ""), "running now") +
    card("progress", d.total ? `${amount(d.done)} of ${amount(d.total)} ${esc(unit)}` : "–",
      d.fraction === null ? "done of the phase" : `${Math.floor(d.fraction * 100)} % of ` +
      `the phase`) +
    card("elapsed", seconds(d.elapsed_s), "since the start began") +
    card("remaining", d.remaining_s === null ? "–" : seconds(d.remaining_s),
      "estimated to finish the phase") +
    `</div>` + (d.fraction === null ? "" : `<progress id="starting-bar" max="1" ` +
      `value="${d.fraction}"></progress>`) +
    table("restart-phases", [{key: "name", label: "phase"},
      {key: "state", label: "state", fmt: (v) => badge(v)},
      {key: "seconds", label: "time"}], phases) + `</section>`;
  $("view").dataset.view = "starting";
  $("toolbar").dataset.key = "";        // the view's own toolbar comes back once it runs
  $("toolbar").innerHTML = "";
  $("view-error").hidden = true;
  $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
}

function showLogin(message) {
  state.auth = null;
  sessionStorage.removeItem(AUTH_KEY);
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("who").textContent = "";
}

function route() {
  const [view, ...rest] = (location.hash.slice(1) || "overview").split("/");
  const arg = rest.length ? decodeURIComponent(rest.join("/")) : null;
  if (view === "queue" && (state.view !== "queue" || state.arg !== arg)) {
    state.browse.cursors = [""];
  }
  state.view = views[view] ? view : "overview";
  state.arg = arg;
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.view === state.view ||
      (state.view === "queue" && a.dataset.view === "queues"));
  }
  $("toolbar").dataset.key = "";
  $("toolbar").innerHTML = "";
  $("view").innerHTML = "";
  refresh();
}

document.addEventListener("submit", (ev) => {
  ev.preventDefault();
  if (ev.target.id === "login") {
    const user = $("login-user").value, password = $("login-password").value;
    state.auth = "Basic " + btoa(unescape(encodeURIComponent(`${user}:${password}`)));
    sessionStorage.setItem(AUTH_KEY, state.auth);
    $("login").hidden = true;
    state.qmgr = null;                 // read the session again as this user
    refresh();
  } else if (ev.target.id === "mqsc-form") {
    const command = $("mqsc-command").value.trim();
    if (command) runCommand(command);
  }
});

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);
