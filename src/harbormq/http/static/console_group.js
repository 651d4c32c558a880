// harbormq console: the queue sharing group page (#group), read from
// /console/api/group (console_group.py). Loaded after console.js, whose views,
// tables and runCommand actions it uses: every action here is one MQSC command
// posted to runCommand, its answer (RECOVER's plan, progress and outcome) shown in
// the actions panel like any other.
"use strict";

const orDash = (v) => esc(v === "" || v === null || v === undefined ? "–" : v);

function groupStructureActions(s) {
  const name = quoted(s.cfstruct);
  const actions = [{label: "Back up", command: `BACKUP CFSTRUCT(${name})`}];
  if (s.status === "FAILED") {
    actions.push({label: "Recover", command: `RECOVER CFSTRUCT(${name})`},
                 {label: "Recover: purge", command: `RECOVER CFSTRUCT(${name}) TYPE(PURGE)`,
                  danger: true});
  } else {
    actions.push({label: "Fail", command: `RESET CFSTRUCT(${name}) ACTION(FAIL)`,
                  danger: true});
  }
  return actions;
}

views.group = async function group() {
  const d = await api("/console/api/group");
  ensureToolbar("", () => "", () => {});
  if (!d.member) {
    return `<section id="no-group"><h2>Queue sharing group</h2><p>Queue manager ` +
      `${esc(d.qmgr)} is not a member of a queue sharing group (<code>harbormq create ` +
      `--qsg NAME --qsg-db CONNINFO</code>).</p></section>`;
  }
  const m = d.membership && !d.membership.error ? d.membership : {};
  const members = Array.isArray(d.members) ? d.members : [];
  const structures = Array.isArray(d.structures) ? d.structures : [];
  return `<section id="group-membership"><h2>Queue sharing group ${esc(m.qsgname)} ` +
    `<span class="muted">DISPLAY GROUP, DISPLAY QMSTATUS</span></h2><div class="cards">` +
    card("qsgname", esc(m.qsgname), "group") +
    card("members", num(members.length), "members") +
    card("active", num(members.filter((x) => x.status === "ACTIVE").length),
         "members active") +
    card("qsgnum", num(m.qsgnum), `member number of ${d.qmgr}`) +
    card("qsgstat", badge(m.qsgstat || "?"), "this member's group connection") +
    card("shqueues", num(m.shqueues), "shared queues") +
    `</div>${failed(d.membership) || ""}` +
    (failed(d.members) || table("member-table", [
      {key: "qmname", label: "member", fmt: (v, r) => esc(v) +
        (r.this ? ' <span class="muted">(this one)</span>' : "")},
      {key: "number", label: "number", num: true},
      {key: "status", label: "state", fmt: (v) => badge(v)},
      {key: "startti", label: "started", fmt: (v, r) => esc(`${r.startda} ${v}`)},
      {key: "hbtime", label: "last heartbeat"}], members)) +
    `</section><section id="group-structures"><h2>CF structures <span class="muted">` +
    `DISPLAY CFSTRUCT, DISPLAY CFSTATUS TYPE(SUMMARY|BACKUP|CONNECT)</span></h2>` +
    (failed(d.structures) || table("cfstruct-table", [
      {key: "cfstruct", label: "structure"},
      {key: "status", label: "state", fmt: (v) => badge(v)},
      {key: "cflevel", label: "CF level", num: true},
      {key: "recover", label: "RECOVER"}, {key: "recauto", label: "RECAUTO"},
      {key: "entsused", label: "messages", num: true},
      {key: "connected", label: "members connected", fmt: (v) => esc((v || []).join(", "))},
      {key: "faildate", label: "failed", fmt: (v, r) => orDash(`${v || ""} ${r.failtime || ""}`
        .trim())},
      {key: "backup", label: "last backup", fmt: (b) => b && b.bkupdate ?
        esc(`${b.bkupdate} ${b.bkuptime} by ${b.qmname}: ${b.bkupmsgs} messages, ` +
            `${b.bkupsize} MB; needs the logs of ${String(b.logs).replace(/,/g, ", ")}`) :
        "none"}],
      structures, groupStructureActions)) +
    `</section><section id="group-queues"><h2>Shared queues <span class="muted">DISPLAY ` +
    `QLOCAL(*) QSGDISP(SHARED)</span></h2>` +
    (failed(d.queues) || table("shared-queue-table", [
      {key: "queue", label: "queue"}, {key: "cfstruct", label: "structure"},
      {key: "curdepth", label: "depth", num: true},
      {key: "uncom", label: "uncommitted", num: true},
      {key: "maxdepth", label: "max depth", num: true},
      {key: "ipprocs", label: "getters here", num: true},
      {key: "opprocs", label: "putters here", num: true},
      {key: "descr", label: "description"}], Array.isArray(d.queues) ? d.queues : [])) +
    "</section>";
};

// the Group link is shown on a member of a group only (the session says which);
// read once the page has a login, and again after each login
async function showGroupLink() {
  const link = document.querySelector('#nav a[data-view="group"]');
  if (!link || !state.auth) return;
  try {
    link.hidden = !(await api("/console/api/session")).qsg_member;
  } catch (e) {
    // not logged in (yet): the link stays, and the page says what it can
  }
}
window.addEventListener("DOMContentLoaded", showGroupLink);
document.addEventListener("submit", (ev) => {
  if (ev.target.id === "login") showGroupLink();
});
