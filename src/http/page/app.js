// tollgate's operator page: polls this node's read-only endpoints every 2 s while the page is
// visible, and writes what they say with textContent only (keys are whatever clients sent:
// never markup). No library, no asset from outside the daemon.
"use strict";

const POLL_MS = 2000;
const HISTORY = 60;  // points per rule: two minutes at one poll every 2 s
const TOP_RULES = 4;

const history = new Map();  // rule -> [{checks, denied}] per second, oldest first
let previous = null;        // {at, stats, rules}: the last poll, for rates

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

async function getJson(path) {
  const r = await fetch(path, {credentials: "same-origin", cache: "no-store"});
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

const num = (x) => Number(x || 0);  // 64-bit counts arrive as strings (protobuf's JSON mapping)
const fmt = (x, digits = 0) => num(x).toLocaleString("en-US", {maximumFractionDigits: digits});

function ago(ms) {
  if (ms < 0) return "never";
  return ms < 1000 ? ms + " ms ago" : fmt(ms / 1000, 1) + " s ago";
}

function showMembers(doc) {
  const members = doc.members || [];
  const self = members.find((m) => m.self);
  if (self) {
    document.getElementById("node").textContent = self.id;
    document.title = "tollgate · " + self.id;
  }
  fill(document.querySelector("#members tbody"), members.map((m) =>
    el("tr", {class: "member " + m.state, "data-id": m.id},
      el("td", {class: "key"}, m.id + (m.self ? " (this node)" : "")), el("td", {}, m.address),
      el("td", {class: "state-" + m.state}, m.state), el("td", {class: "num"}, String(m.incarnation)),
      el("td", {class: "num"}, m.self ? "" : ago(num(m.last_heard_ms))))));
  const alive = members.filter((m) => m.state === "alive").length;
  document.getElementById("members-summary").textContent = alive + " of " + members.length + " alive";
}

const GOSSIP = [
  ["bytes sent/s", (s) => s.transport_bytes_sent],
  ["bytes received/s", (s) => s.transport_bytes_received],
  ["messages sent/s", (s) => s.gossip_messages_sent],
  ["messages received/s", (s) => s.gossip_messages_received],
  ["dropped/s", (s) => Object.entries(s).filter(([k]) => k.startsWith("transport_dropped_") ||
      k === "transport_send_dropped" || k === "gossip_queue_overflow").reduce((a, [, v]) => a + num(v), 0)],
  // Convergence, as far as one node can see it without synchronised clocks: how much of what
  // peers sealed arrived only by repair, and how much was lost for good (never charged).
  ["batches applied/s", (s) => s.batches_applied],
  ["batches repaired for peers/s", (s) => s.repairs_sent],
  ["batches lost for good/s", (s) => s.seqs_abandoned],
  ["members turned suspect or unreachable/s", (s) => s.members_failed],
  ["members back to alive/s", (s) => s.members_recovered],
];

function showGossip(stats, dt) {
  const dl = document.getElementById("gossip");
  const items = [];
  for (const [name, get] of GOSSIP) {
    const rate = previous && dt > 0 ? (num(get(stats)) - num(get(previous.stats))) / dt : null;
    items.push(el("dt", {}, name), el("dd", {"data-name": name}, rate === null ? "…" : fmt(rate, 1)));
  }
  items.push(el("dt", {}, "members failed, in all"), el("dd", {}, fmt(stats.members_failed)));
  items.push(el("dt", {}, "members recovered, in all"), el("dd", {}, fmt(stats.members_recovered)));
  items.push(el("dt", {}, "batches lost for good, in all"), el("dd", {}, fmt(stats.seqs_abandoned)));
  dl.replaceChildren(...items);
}

function spark(points) {
  const svgNs = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNs, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 " + (HISTORY - 1) + " 28");
  svg.setAttribute("preserveAspectRatio", "none");
  const top = Math.max(1, ...points.map((p) => p.checks));
  for (const series of ["checks", "denied"]) {
    const line = document.createElementNS(svgNs, "polyline");
    line.setAttribute("class", series);
    const offset = HISTORY - points.length;
    line.setAttribute("points", points.map((p, i) => (offset + i) + "," + (27 - 26 * p[series] / top).toFixed(2)).join(" "));
    svg.append(line);
  }
  return svg;
}

function showRules(doc, dt) {
  document.getElementById("rules-version").textContent = "version " + doc.version +
      (num(doc.omitted) ? " (" + fmt(doc.omitted) + " more not shown)" : "");
  const before = new Map(((previous && previous.rules.rules) || []).map((r) => [r.rule, r]));
  const rows = [];
  for (const r of doc.rules || []) {
    const was = before.get(r.rule);
    let checks = null, denied = null;
    if (was && dt > 0) {
      checks = (num(r.checks) - num(was.checks)) / dt;
      denied = (num(r.denied) - num(was.denied)) / dt;
      const h = history.get(r.rule) || [];
      h.push({checks, denied});
      if (h.length > HISTORY) h.shift();
      history.set(r.rule, h);
    }
    const limit = r.limit ? r.limit.rate + ", burst " + fmt(r.limit.burst) : "";
    rows.push(el("tr", {"data-rule": r.rule}, el("td", {class: "key"}, r.rule), el("td", {}, limit),
      el("td", {class: "num checks"}, checks === null ? "…" : fmt(checks, 1)),
      el("td", {class: "num denied"}, denied === null ? "…" : fmt(denied, 1)),
      el("td", {}, spark(history.get(r.rule) || []))));
  }
  fill(document.querySelector("#rules tbody"), rows);
}

function bounds(k) {
  return k.lower === k.upper ? fmt(k.upper) : fmt(k.lower) + "–" + fmt(k.upper);
}

function keyTable(title, keys, metric) {
  const body = el("tbody", {});
  keys.forEach((k, i) => {
    const key = el("td", {class: "key", title: k.descriptor ? "Envoy descriptor; click to look up its balance" : "look up its balance"}, k.descriptor || k.key);
    key.addEventListener("click", () => lookUp(k.key));
    body.append(el("tr", {class: "top-key"}, el("td", {class: "num"}, i + 1), key, el("td", {class: "num"}, bounds(k))));
  });
  if (!keys.length) body.append(el("tr", {}, el("td", {colspan: "3", class: "muted"}, "none in the window")));
  return el("table", {class: "top-keys " + metric},
    el("thead", {}, el("tr", {}, el("th", {}, "#"), el("th", {}, title), el("th", {class: "num"}, metric))), body);
}

function showTop(doc) {
  const rules = (doc.rules || []).slice(0, TOP_RULES);
  const blocks = rules.map((r) => el("div", {class: "rule-top", "data-rule": r.rule},
    el("h3", {}, r.rule),
    el("div", {class: "muted summary"}, fmt(r.denied.total) + " denied, " + fmt(r.tokens.total) +
      " tokens admitted; each count within " + fmt(r.denied.error_bound) + " (denied) and " +
      fmt(r.tokens.error_bound) + " (tokens); " + r.members_reporting + " members reporting"),
    el("div", {class: "pair"}, keyTable("most denied", r.denied.keys, "denied"),
      keyTable("most tokens", r.tokens.keys, "tokens"))));
  if (!blocks.length) blocks.push(el("p", {class: "muted"}, "no rule has counted anything in the window"));
  document.getElementById("top").replaceChildren(...blocks);
}

async function lookUp(key) {
  document.getElementById("balance-key").value = key;
  const dl = document.getElementById("balance");
  try {
    const b = await getJson("/v1/balance?key=" + encodeURIComponent(key));
    const items = [el("dt", {}, "key"), el("dd", {class: "key", id: "balance-of"}, b.key)];
    if (!b.limited) {
      items.push(el("dt", {}, "limit"), el("dd", {}, "no rule governs this key"));
    } else {
      items.push(el("dt", {}, "rule"), el("dd", {class: "key"}, b.rule));
      items.push(el("dt", {}, "limit"), el("dd", {}, b.limit.rate + ", burst " + fmt(b.limit.burst) +
        ", debt up to " + fmt(b.limit.max_debt)));
      items.push(el("dt", {}, "balance"), el("dd", {id: "balance-tokens"}, fmt(b.balance, 3)));
      items.push(el("dt", {}, "debt"), el("dd", {id: "balance-debt"}, fmt(b.debt, 3)));
      if (!b.held) items.push(el("dt", {}, ""), el("dd", {class: "muted"}, "not held here: full at its first check"));
    }
    dl.replaceChildren(...items);
  } catch (e) {
    dl.replaceChildren(el("dd", {class: "error"}, e.message));
  }
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const [members, stats, rules, top] = await Promise.all(
      [getJson("/v1/members"), getJson("/v1/stats"), getJson("/v1/rules"), getJson("/v1/top?k=10")]);
    const at = performance.now();
    const dt = previous ? (at - previous.at) / 1000 : 0;
    showMembers(members);
    showGossip(stats.stats, dt);
    showRules(rules, dt);
    showTop(top);
    previous = {at, stats: stats.stats, rules};
    status.textContent = "live";
    status.className = "status ok";
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    status.textContent = "not answering: " + e.message;
    status.className = "status bad";
  }
}

function loop() {
  if (document.visibilityState === "visible") poll();
  setTimeout(loop, POLL_MS);
}

document.getElementById("balance-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  lookUp(document.getElementById("balance-key").value);
});
loop();
