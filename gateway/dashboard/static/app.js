// Caldera dashboard: a small page over the gateway's /ui/api JSON routes.
// No framework and no build step. Every value from the server is put in the page with
// textContent (never innerHTML): job names and reasons are written by users.
"use strict";

const POLL_MS = 2000;
const PAGE = 50;
const $ = (id) => document.getElementById(id);
const state = { sort: "id", order: "asc", offset: 0, timer: null, view: null, busy: false, again: false };

// --- token (TCP listener only) -------------------------------------------------------
(function takeTokenFromHash() {
  const m = location.hash.match(/[#&]token=([^&]+)/);
  if (m) {
    sessionStorage.setItem("caldera-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + "#/queue");  // keep it out of view
  }
})();

async function api(path, method) {
  const headers = {};
  const token = sessionStorage.getItem("caldera-token");
  if (token) headers.Authorization = "Bearer " + token;
  const resp = await fetch(path, { method: method || "GET", headers, cache: "no-store" });
  if (resp.status === 401) {
    showLogin(token ? "That token was refused (expired or not valid)." : "");
    throw new Error("unauthorized");
  }
  const data = await resp.json();
  if (!resp.ok) {
    const d = data && data.detail;
    throw new Error(d && d.message ? d.message : "HTTP " + resp.status);
  }
  return data;
}

function showLogin(message) {
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== "login";
  $("login-error").textContent = message;
  $("queue").tBodies[0].replaceChildren();  // nothing seen with the old token stays
  $("clusters").replaceChildren();
  $("decisions").tBodies[0].replaceChildren();
  $("fairshare").tBodies[0].replaceChildren();
  $("topology").replaceChildren();
  stopPolling();
}

$("login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const t = $("login-token").value.trim().replace(/^SLURM_JWT=/, "");
  if (t) sessionStorage.setItem("caldera-token", t);
  $("login").hidden = true;
  start();
});

// --- helpers -------------------------------------------------------------------------
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function fmtTime(t) {
  if (!t) return "";
  const d = new Date(t * 1000);
  return d.toISOString().replace("T", " ").slice(0, 19);
}

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function fillSelect(sel, values) {
  const keep = sel.value;
  while (sel.options.length > 1) sel.remove(1);
  for (const v of values) sel.add(new Option(v, v));
  sel.value = values.includes(keep) ? keep : "";
}

function bar(used, total) {
  const b = el("span", null, "bar");
  const fill = el("span");
  fill.style.width = (total ? Math.min(100, (100 * used) / total) : 0).toFixed(1) + "%";
  b.appendChild(fill);
  b.title = used + " / " + total;
  return b;
}

// --- queue ---------------------------------------------------------------------------
async function loadQueue() {
  const q = new URLSearchParams({
    sort: state.sort, order: state.order, offset: String(state.offset), limit: String(PAGE),
  });
  for (const f of ["user", "state", "partition", "cluster"]) {
    const v = $("f-" + f).value;
    if (v) q.set(f, v);
  }
  const data = await api("api/queue?" + q.toString());
  fillSelect($("f-user"), data.choices.users);
  fillSelect($("f-state"), data.choices.states);
  fillSelect($("f-partition"), data.choices.partitions);
  fillSelect($("f-cluster"), data.choices.clusters);
  const counts = $("counts");
  counts.replaceChildren(el("span", data.total + " jobs"));
  for (const [s, n] of Object.entries(data.counts)) counts.appendChild(el("span", s + ": " + n));
  const body = $("queue").tBodies[0];
  const rows = data.rows.map((r) => {
    const tr = el("tr");
    tr.dataset.jobId = r.job_id;
    const link = el("a", r.id);
    link.href = "#/job/" + r.job_id;
    const idCell = el("td");
    idCell.appendChild(link);
    tr.appendChild(idCell);
    tr.appendChild(el("td", r.partition));
    tr.appendChild(el("td", r.name));
    tr.appendChild(el("td", r.user));
    tr.appendChild(el("td", r.state, "st-" + r.state));
    tr.appendChild(el("td", r.cpus));
    tr.appendChild(el("td", r.cluster));
    tr.appendChild(el("td", r.priority));
    tr.appendChild(el("td", fmtTime(r.submit_time)));
    tr.appendChild(el("td", r.state === "PENDING" ? "(" + r.reason + ")" : r.nodes));
    return tr;
  });
  body.replaceChildren(...rows);
  const last = Math.min(data.offset + data.rows.length, data.matching);
  $("page-info").textContent =
    (data.matching ? data.offset + 1 : 0) + "-" + last + " of " + data.matching;
  $("prev").disabled = data.offset <= 0;
  $("next").disabled = last >= data.matching;
  for (const th of document.querySelectorAll("#queue th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === state.sort);
    th.classList.toggle("desc", th.dataset.sort === state.sort && state.order === "desc");
  }
  await loadChart();
}

for (const th of document.querySelectorAll("#queue th[data-sort]")) {
  th.addEventListener("click", () => {
    const key = th.dataset.sort;
    state.order = state.sort === key && state.order === "asc" ? "desc" : "asc";
    state.sort = key;
    state.offset = 0;
    refresh();
  });
}
for (const f of ["user", "state", "partition", "cluster"]) {
  $("f-" + f).addEventListener("change", () => { state.offset = 0; refresh(); });
}
$("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); refresh(); });
$("next").addEventListener("click", () => { state.offset += PAGE; refresh(); });

// --- chart (SVG) ---------------------------------------------------------------------
const SVG = "http://www.w3.org/2000/svg";
async function loadChart() {
  const data = await api("api/history");
  const w = 600, h = 120, pad = 4;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("id", "chart-svg");
  const s = data.samples;
  const maxJobs = Math.max(1, ...s.map((p) => Math.max(p.pending, p.running)));
  const t0 = s.length ? s[0].time : 0;
  const span = Math.max(1, s.length ? s[s.length - 1].time - t0 : 1);
  const line = (value, max, colour, name) => {
    const pts = s.map((p) => {
      const x = pad + ((p.time - t0) / span) * (w - 2 * pad);
      const y = h - pad - (value(p) / max) * (h - 2 * pad);
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    const pl = document.createElementNS(SVG, "polyline");
    pl.setAttribute("points", pts.join(" "));
    pl.setAttribute("fill", "none");
    pl.setAttribute("stroke", colour);
    pl.setAttribute("stroke-width", "2");
    pl.setAttribute("data-series", name);
    svg.appendChild(pl);
  };
  line((p) => p.pending, maxJobs, "#e65100", "pending");
  line((p) => p.running, maxJobs, "#2e7d32", "running");
  line((p) => (p.cpus ? p.alloc_cpus / p.cpus : 0), 1, "#1565c0", "utilisation");
  const last = s[s.length - 1] || { pending: 0, running: 0, cpus: 0, alloc_cpus: 0 };
  const legend = el("div");
  legend.appendChild(el("span", "pending " + last.pending, "legend st-PENDING"));
  legend.appendChild(el("span", "running " + last.running, "legend st-RUNNING"));
  const pct = last.cpus ? Math.round((100 * last.alloc_cpus) / last.cpus) : 0;
  legend.appendChild(el("span", "CPU utilisation " + pct + "% (max jobs " + maxJobs + ")", "legend"));
  $("chart").replaceChildren(svg, legend);
}

// --- one job -------------------------------------------------------------------------
async function loadJob(id) {
  const data = await api("api/jobs/" + encodeURIComponent(id));
  const j = data.job;
  $("job-title").textContent = "Job " + j.id + " — " + j.name;
  const dl = $("job-fields");
  const fields = [
    ["User", j.user + " (" + j.uid + ")"], ["State", j.state], ["Partition", j.partition],
    ["Cluster", j.cluster], ["Account", j.account], ["QOS", j.qos], ["Priority", j.priority],
    ["CPUs", j.cpus], ["Nodes", j.nodes], ["Submitted", fmtTime(j.submit_time)],
    ["Started", fmtTime(j.start_time)], ["Ended", fmtTime(j.end_time)],
    ["Time limit (min)", j.time_limit >= 4294967294 ? "UNLIMITED" : j.time_limit], ["Exit code", j.exit_code], ["Work dir", j.workdir],
    ["Dependency", j.requested.dependency || ""],
  ];
  dl.replaceChildren();
  for (const [k, v] of fields) { dl.appendChild(el("dt", k)); dl.appendChild(el("dd", v)); }
  $("job-pending").hidden = j.state !== "PENDING";
  $("job-reason").textContent = j.reason;
  $("job-reason-desc").textContent = j.state_desc ? " — " + j.state_desc : "";
  $("job-why").replaceChildren(...(data.why || []).map((line) => el("li", line)));
  const finished = !["PENDING", "RUNNING", "SUSPENDED", "REQUEUED"].includes(j.state);
  $("job-cancel").hidden = !data.may_read_private || finished;
  $("job-cancel").dataset.jobId = j.job_id;
  $("job-events").tBodies[0].replaceChildren(...data.events.map((e) => {
    const tr = el("tr");
    tr.appendChild(el("td", fmtTime(e.time)));
    tr.appendChild(el("td", e.kind));
    tr.appendChild(el("td", JSON.stringify(e.detail)));
    return tr;
  }));
  const routing = data.routing || [];
  $("job-routing-box").hidden = !routing.length && !j.route_note;
  setText($("job-route-note"), j.route_note ? "Last decision: " + j.route_note : "");
  $("job-routing").tBodies[0].replaceChildren(...routing.map((d) => decisionRow(d, false)));
  $("job-steps").tBodies[0].replaceChildren(...data.steps.map((s) => {
    const tr = el("tr");
    for (const v of [j.id + "." + s.step_id, s.name, s.state, s.nodes, s.exit_code]) {
      tr.appendChild(el("td", v));
    }
    return tr;
  }));
  const p = data.private;
  $("job-private").hidden = !p;
  $("private-hidden").hidden = !!p;
  // set only when changed: a re-render every poll would reset a reader's scrolling
  setText($("job-script"), p ? (p.script || "") : "");
  setText($("job-output-path"), p && p.output_path ? p.output_path : "");
  setText($("job-output"), p ? (p.output_tail === null ? "(no output yet)" : p.output_tail) : "");
}

$("job-cancel").addEventListener("click", async () => {
  const id = $("job-cancel").dataset.jobId;
  try {
    await api("api/jobs/" + id + "/cancel", "POST");
    $("job-action").textContent = "Cancel requested.";
  } catch (e) {
    $("job-action").textContent = "Cancel refused: " + e.message;
  }
  refresh();
});

// --- clusters ------------------------------------------------------------------------
async function loadClusters() {
  const data = await api("api/clusters");
  const out = [];
  for (const c of data.clusters) {
    const h = el("h2", "Cluster " + c.name + (c.reachable ? "" : " (unreachable)"));
    const cpus = el("p", "CPUs " + c.alloc_cpus + "/" + c.cpus + " ");
    cpus.appendChild(bar(c.alloc_cpus, c.cpus));
    if (c.gpus) cpus.appendChild(el("span", "  GPUs " + c.alloc_gpus + "/" + c.gpus));
    const pt = el("table");
    pt.className = "partitions";
    const ph = el("tr");
    for (const t of ["Partition", "Nodes", "CPUs used", "", "GPUs used", "Node states"]) ph.appendChild(el("th", t));
    pt.appendChild(ph);
    for (const p of c.partitions) {
      const tr = el("tr");
      tr.appendChild(el("td", p.name + (p.default ? "*" : "") + (p.up ? "" : " (down)")));
      tr.appendChild(el("td", p.nodes));
      tr.appendChild(el("td", p.alloc_cpus + "/" + p.cpus));
      const b = el("td"); b.appendChild(bar(p.alloc_cpus, p.cpus)); tr.appendChild(b);
      tr.appendChild(el("td", p.gpus ? p.alloc_gpus + "/" + p.gpus : "-"));
      tr.appendChild(el("td", Object.entries(p.states).map(([k, v]) => k + ":" + v).join(" ")));
      pt.appendChild(tr);
    }
    const nt = el("table");
    nt.className = "nodes";
    const nh = el("tr");
    for (const t of ["Node", "State", "CPUs used", "", "Memory used (MiB)", "GPUs used", "Jobs", "Reason"]) nh.appendChild(el("th", t));
    nt.appendChild(nh);
    for (const n of c.nodes) {
      const tr = el("tr", null, "node-" + n.state);
      tr.dataset.node = n.name;
      tr.appendChild(el("td", n.name));
      tr.appendChild(el("td", n.state));
      tr.appendChild(el("td", n.alloc_cpus + "/" + n.cpus));
      const b = el("td"); b.appendChild(bar(n.alloc_cpus, n.cpus)); tr.appendChild(b);
      tr.appendChild(el("td", n.alloc_memory_mb + "/" + n.memory_mb));
      tr.appendChild(el("td", n.gpus ? n.alloc_gpus + "/" + n.gpus : "-"));
      tr.appendChild(el("td", n.jobs));
      tr.appendChild(el("td", n.reason || ""));
      nt.appendChild(tr);
    }
    out.push(h, cpus, pt, nt);
  }
  $("clusters").replaceChildren(...out);
}

// --- routing decisions, fair share, topology ---------------------------------------
function comparedText(compared) {
  return compared.map((c) => c.cluster + " " + (c.start === null ? "unknown" : fmtTime(c.start))).join(", ");
}

function decisionRow(d, withJob) {
  const tr = el("tr", null, "decision-" + d.kind);
  tr.appendChild(el("td", fmtTime(d.time)));
  if (withJob) {
    tr.dataset.jobId = d.job_id;
    const link = el("a", d.id);
    link.href = "#/job/" + d.job_id;
    const idCell = el("td");
    idCell.appendChild(link);
    tr.appendChild(idCell);
    tr.appendChild(el("td", d.name));
    tr.appendChild(el("td", d.user));
  }
  tr.appendChild(el("td", d.kind));
  tr.appendChild(el("td", d.from || ""));
  tr.appendChild(el("td", d.to || "(nowhere)"));
  tr.appendChild(el("td", comparedText(d.compared)));
  tr.appendChild(el("td", d.why, "why"));
  return tr;
}

async function loadDecisions() {
  const data = await api("api/decisions");
  $("decisions").tBodies[0].replaceChildren(...data.decisions.map((d) => decisionRow(d, true)));
}

async function loadFairshare() {
  const data = await api("api/fairshare");
  $("fairshare").tBodies[0].replaceChildren(...data.rows.map((r) => {
    const tr = el("tr", null, r.user === null ? "fs-account" : "fs-user");
    const name = el("td", r.user === null ? r.account : r.user);
    name.style.paddingLeft = (0.5 + 1.5 * r.depth).toFixed(1) + "em";
    tr.appendChild(name);
    for (const v of [r.shares, r.norm_shares, r.raw_usage, r.effectv_usage, r.fairshare]) {
      tr.appendChild(el("td", v));
    }
    return tr;
  }));
}

async function loadTopology() {
  const data = await api("api/topology");
  const out = [];
  for (const c of data.clusters) {
    const box = el("div", null, "topo-cluster");
    box.appendChild(el("h2", "Cluster " + c.name + (c.reachable ? "" : " (unreachable)")));
    for (const sw of c.switches) {
      const s = el("div", null, "topo-switch");
      s.dataset.switch = sw.name;
      const head = el("div", sw.name + (sw.above.length ? "  \u2191 " + sw.above.join(" \u2191 ") : ""), "topo-head");
      head.appendChild(bar(Math.round(sw.share * 100), 100));
      s.appendChild(head);
      for (const n of sw.nodes) {
        const t = el("div", null, "topo-node node-" + n.state);
        t.dataset.node = n.name;
        t.title = n.name + " " + n.state + ": CPUs " + n.alloc_cpus + "/" + n.cpus +
          (n.gpus ? ", GPUs " + n.alloc_gpus + "/" + n.gpus : "") + ", jobs " + n.jobs;
        const fill = el("span", null, "topo-fill");
        fill.style.height = Math.min(100, n.share * 100).toFixed(1) + "%";
        t.appendChild(fill);
        t.appendChild(el("span", n.name, "topo-name"));
        t.appendChild(el("span", n.state, "topo-state"));
        s.appendChild(t);
      }
      box.appendChild(s);
    }
    out.push(box);
  }
  $("topology").replaceChildren(...out);
}

// --- routing and live updates --------------------------------------------------------
function route() {
  const h = location.hash || "#/queue";
  const m = h.match(/^#\/job\/(\d+)/);
  if (m) return { name: "job", id: m[1] };
  if (h.startsWith("#/clusters")) return { name: "clusters" };
  if (h.startsWith("#/decisions")) return { name: "decisions" };
  if (h.startsWith("#/topology")) return { name: "topology" };
  if (h.startsWith("#/fairshare")) return { name: "fairshare" };
  return { name: "queue" };
}

async function refresh() {
  if (state.busy) { state.again = true; return; }
  state.busy = true;
  state.again = false;
  const r = route();
  for (const s of document.querySelectorAll("main > section")) {
    s.hidden = s.id !== "view-" + r.name;
  }
  try {
    if (r.name === "job") await loadJob(r.id);
    else if (r.name === "clusters") await loadClusters();
    else if (r.name === "decisions") await loadDecisions();
    else if (r.name === "topology") await loadTopology();
    else if (r.name === "fairshare") await loadFairshare();
    else await loadQueue();
    $("error").textContent = "";
    $("last-update").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.loaded = String(Date.now());
  } catch (e) {
    if (e.message !== "unauthorized") $("error").textContent = e.message;
  } finally {
    state.busy = false;
  }
  if (state.again) refresh();  // a navigation or filter change arrived meanwhile
}

function stopPolling() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
}

async function start() {
  try {
    const me = await api("api/whoami");
    $("whoami").textContent = me.user + (me.operator ? " (operator)" : "") + " @ " + me.cluster;
  } catch (e) {
    return;
  }
  await refresh();
  stopPolling();
  state.timer = setInterval(refresh, POLL_MS);  // live updates: poll the JSON routes
}

window.addEventListener("hashchange", refresh);
start();
