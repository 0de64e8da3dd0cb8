"use strict";
// The Switchyard operator console. Every value from the API is rendered
// with textContent or DOM calls (el below), never parsed as HTML: a queue
// name, a key or a payload cannot inject markup. The CSP allows no inline
// script anyway.

// The token lives in sessionStorage: it survives reloads of this tab and
// is gone when the tab closes.
const tokenKey = "switchyard_admin_token";
const pollMs = 2000;
// rateWindowS is how far back the queue rates look.
const rateWindowS = 300;

const $ = (id) => document.getElementById(id);
const form = $("auth");
const input = $("token");
const statusLine = $("status");
const flashLine = $("flash");
const main = $("main");

let who = null; // {name, role} from GET /v1/whoami
let timer = 0;
// gen counts route changes: an answer for an older route is dropped.
let gen = 0;
let view = null; // {page, id, params, data: the element re-rendered on each poll}
let carried = null; // a flash for the next page: an action that moved there says what it did

// ---------------------------------------------------------------------
// DOM helpers.

// el builds an element. attrs: class, href, title, text, on<event>
// handlers, and any other attribute; children: nodes, strings (as text),
// arrays of them; null and undefined are skipped.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  append(e, children);
  return e;
}

function append(parent, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(parent, c);
    else parent.append(c instanceof Node ? c : String(c));
  }
}

function table(headers, rows, emptyText) {
  if (rows.length === 0) return el("p", { class: "empty", text: emptyText || "none" });
  const thead = el("thead", {}, el("tr", {}, headers.map((h) => {
    const [text, cls] = Array.isArray(h) ? h : [h];
    return el("th", { class: cls, text });
  })));
  // In a box of its own that scrolls sideways: a table wider than the
  // window (the queues' on a phone) must not make the page do so.
  return el("div", { class: "scroll" }, el("table", {}, thead, el("tbody", {}, rows)));
}

// td: a cell; v may be a node, a string or a number (right-aligned).
function td(v, cls) {
  if (typeof v === "number") cls = cls ? cls + " num" : "num";
  return el("td", { class: cls }, v);
}

// keyCell is a record's key in a table: cut with an ellipsis at the
// column's width (a key is whatever a record carried, and a long one must
// not push the page sideways), whole in its tooltip.
function keyCell(key, content) {
  return el("td", { class: "clip", title: key || null }, content === undefined ? key || "" : content);
}

// errCell is a last error in a list: cut at the column's width, whole in
// its tooltip.
function errCell(text) {
  return el("td", { class: "err", title: text || null }, text || "");
}

function badge(text, cls) {
  return el("span", { class: "badge " + (cls || text) }, text);
}

function link(href, text) {
  return el("a", { href }, text);
}

function jobLink(id) {
  return id === null || id === undefined ? el("span", { class: "muted", text: "—" }) : link("#/jobs/" + id, "job " + id);
}

function section(title, ...children) {
  return el("section", { class: "card" }, el("h2", { text: title }), children);
}

function fields(pairs) {
  const dl = el("dl", { class: "fields" });
  for (const [k, v] of pairs) {
    if (v === null || v === undefined || v === "") continue;
    dl.append(el("dt", { text: k }), el("dd", {}, v));
  }
  return dl;
}

// ---------------------------------------------------------------------
// Formatting.

function age(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 60) return Math.round(seconds) + " s";
  if (seconds < 3600) return (seconds / 60).toFixed(1) + " min";
  if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h";
  return (seconds / 86400).toFixed(1) + " d";
}

// when shows a time as "3.2 min ago" or "in 40.0 s", with the exact time
// as its tooltip.
function when(iso) {
  if (!iso) return el("span", { class: "muted", text: "—" });
  const t = new Date(iso);
  const d = (Date.now() - t.getTime()) / 1000;
  const text = d >= 0 ? age(d) + " ago" : "in " + age(-d);
  return el("span", { title: t.toLocaleString() + " (" + iso + ")", text });
}

// whenAt is when with the exact time shown too, for a page's fields: on
// a phone there is no tooltip, and an operator matches it with logs.
function whenAt(iso) {
  if (!iso) return when(iso);
  const exact = new Date(iso).toLocaleString([], { year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });
  return el("span", {}, when(iso), el("span", { class: "muted", text: " · " + exact }));
}

function count(n) {
  return n === undefined || n === null ? "—" : n.toLocaleString("en-US");
}

// ---------------------------------------------------------------------
// Payloads: base64 from the API, shown as pretty JSON, else UTF-8 text,
// else a hex dump.

function bytesOf(b64) {
  const bin = atob(b64 || "");
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

const hexLimit = 64 << 10;

function decodeBytes(bytes) {
  if (bytes.length === 0) return { kind: "empty", text: "" };
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return { kind: "hex", text: hexDump(bytes) };
  }
  try {
    return { kind: "JSON", text: JSON.stringify(JSON.parse(text), null, 2) };
  } catch {
    // not JSON: text, unless it holds control characters
  }
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x08\x0B\x0C\x0E-\x1F\x7F]/.test(text)) return { kind: "hex", text: hexDump(bytes) };
  return { kind: "text", text };
}

function hexDump(bytes) {
  const lines = [];
  const n = Math.min(bytes.length, hexLimit);
  for (let off = 0; off < n; off += 16) {
    const row = bytes.subarray(off, Math.min(off + 16, n));
    let hex = "";
    let ascii = "";
    for (let i = 0; i < 16; i++) {
      if (i === 8) hex += " ";
      if (i < row.length) {
        hex += row[i].toString(16).padStart(2, "0") + " ";
        ascii += row[i] >= 0x20 && row[i] < 0x7f ? String.fromCharCode(row[i]) : ".";
      } else {
        hex += "   ";
      }
    }
    lines.push(off.toString(16).padStart(8, "0") + "  " + hex + " |" + ascii + "|");
  }
  if (bytes.length > n) lines.push("… " + (bytes.length - n) + " more bytes");
  return lines.join("\n");
}

// payloadBlock shows decoded bytes with a note of how they were decoded.
function payloadBlock(b64, what) {
  const bytes = bytesOf(b64);
  const d = decodeBytes(bytes);
  const note = el("p", { class: "kindnote", text: bytes.length + " bytes" + (d.kind === "empty" ? "" : ", shown as " + d.kind) });
  if (d.kind === "empty") return [note];
  return [note, el("pre", { class: d.kind === "hex" ? "hex payload" : "payload", "data-kind": d.kind, "data-what": what, text: d.text })];
}

// shortValue decodes a header value on one line.
function shortValue(b64) {
  const d = decodeBytes(bytesOf(b64));
  if (d.kind === "JSON") return JSON.stringify(JSON.parse(new TextDecoder().decode(bytesOf(b64))));
  if (d.kind === "hex") return Array.from(bytesOf(b64), (b) => b.toString(16).padStart(2, "0")).join(" ");
  return d.text;
}

function headersTable(headers) {
  return table(["key", "value"], (headers || []).map((h) => el("tr", {}, td(h.key), td(shortValue(h.value_base64), "wrap"))), "no headers");
}

// errorsTable lists failed attempts, oldest first. A re-drive counts a
// job's attempts from 1 again and keeps the errors before it, so a row
// between the runs says where each re-drive came: at the place the API
// gives (a job's redrives, each with errors_before). Where the numbers
// start again with no re-drive known there (a DLQ entry's history, a
// replay --rerun), a row still says that a new run began.
function errorsTable(errors, redrives) {
  errors = errors || [];
  const before = new Map(); // index in errors → the re-drives just before it
  for (const r of redrives || []) {
    const i = Math.min(Math.max(r.errors_before, 0), errors.length);
    before.set(i, [...(before.get(i) || []), r]);
  }
  const rows = [];
  let last = 0; // the attempt number of the error before
  for (let i = 0; i <= errors.length; i++) {
    const marks = before.get(i) || [];
    for (const r of marks) {
      rows.push(el("tr", { class: "run", "data-redrive": r.entry_id }, el("td", { colspan: 3 },
        "Re-driven from the DLQ ", when(r.at), " by ", el("bdi", { text: r.by }),
        " (", link("#/dlq/" + r.entry_id, "entry " + r.entry_id), "): attempts count from 1 again")));
    }
    if (i === errors.length) break;
    const e = errors[i];
    const n = e.attempt !== undefined ? e.attempt : i + 1;
    if (marks.length === 0 && i > 0 && n <= last) {
      rows.push(el("tr", { class: "run", "data-rerun": "" }, el("td", { colspan: 3,
        text: "Run again (a re-drive or a replay --rerun): attempts count from 1 again" })));
    }
    last = n;
    rows.push(el("tr", {}, td(n), td(when(e.at)), td(e.error || "", "wrap")));
  }
  return table([["attempt", "num"], "at", "error"], rows, "no errors recorded");
}

// ---------------------------------------------------------------------
// The API.

class APIError extends Error {
  constructor(status, body) {
    super((body && body.error) || "HTTP " + status);
    this.status = status;
    this.field = body && body.field;
  }
  // unavailable: the server has no such endpoint (an older server).
  get unavailable() {
    return this.status === 405 || this.status === 501 ||
      (this.status === 404 && this.message.startsWith("no such endpoint"));
  }
}

class AuthError extends Error {}

async function api(method, path) {
  const token = sessionStorage.getItem(tokenKey);
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const res = await fetch(path, { method, headers, cache: "no-store" });
  if (res.status === 401) throw new AuthError(token ? "The token was refused." : "This server needs an admin token.");
  let body = null;
  try {
    body = await res.json();
  } catch {
    // not JSON: an error without a body we can read
  }
  if (!res.ok) throw new APIError(res.status, body);
  return body;
}

// query builds "?a=1&b=2" from the non-empty values.
function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? "?" + s : "";
}

function canOperate() {
  return who !== null && who.role !== "read";
}

function flash(text, isError) {
  flashLine.hidden = false;
  flashLine.className = isError ? "error" : "";
  flashLine.textContent = text;
}

// act takes an action (a POST) and polls at once, so the page shows its
// effect. It returns the answer, or null when the action failed.
async function act(path, done) {
  try {
    const body = await api("POST", path);
    flash(done ? done(body) : "Done: POST " + path);
    refresh();
    return body;
  } catch (err) {
    if (err instanceof AuthError) showAuth(err.message);
    else flash((err.unavailable ? "Not available on this server: " : "Failed: ") + err.message, true);
    return null;
  }
}

// button: an action button, or nothing at all for a read token. With
// opts.ask, a first click asks that question beside a button that acts
// (opts.yes, else label) and one that keeps things as they are (opts.no,
// else "Keep"), for what cannot be undone; the question stays through the
// page's polls (view.asking). The focus moves to the keeping button, so
// that a keyboard user's second Enter does nothing for good, and back to
// the action's button when kept. opts.then(answer) runs once the action
// succeeded.
function actionButton(label, path, opts) {
  if (!canOperate()) return null;
  opts = opts || {};
  const name = opts.name || label.toLowerCase();
  const run = async (e) => {
    e.preventDefault();
    e.currentTarget.disabled = true;
    view.asking = null;
    const body = await act(path, opts.done);
    if (body && opts.then) opts.then(body);
  };
  if (opts.ask && view.asking === path) {
    return el("div", { class: "confirm", "data-ask": name }, opts.ask,
      el("button", { class: opts.cls || "secondary", "data-action": name + "-confirm", onclick: run }, opts.yes || label),
      el("button", { class: "secondary", "data-action": name + "-keep", onclick: () => {
        view.asking = null;
        view.focus = '[data-action="' + name + '"]';
        refresh();
      } }, opts.no || "Keep"));
  }
  const ask = () => { view.asking = path; view.focus = '[data-action="' + name + '-keep"]'; refresh(); };
  return el("button", { class: opts.cls || "secondary", "data-action": name, onclick: opts.ask ? ask : run }, label);
}

// ---------------------------------------------------------------------
// Routing: #/page, #/page/id, #/page?filter=value.

function parseHash() {
  const h = location.hash.replace(/^#\/?/, "");
  const [path, qs] = h.split("?", 2);
  const [page, id] = path.split("/", 2);
  return { page: pages[page] ? page : "queues", id: id ? decodeURIComponent(id) : "", params: new URLSearchParams(qs || "") };
}

function setHash(page, params) {
  location.hash = "#/" + page + query(params);
}

function onRoute() {
  gen++;
  flashLine.hidden = true;
  if (carried) flash(carried);
  carried = null;
  const r = parseHash();
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === r.page);
  view = { page: r.page, id: r.id, params: r.params, data: el("div", { id: "data" }), built: false };
  main.replaceChildren();
  refresh();
}

// build lays out the page's fixed part (title, filters) above its data,
// once the caller's role is known: a read token gets no action controls.
function build(v) {
  const p = pages[v.page];
  main.replaceChildren();
  append(main, [p.setup ? p.setup(v) : null, v.data]);
  v.built = true;
}

// refresh polls the current page: one timer, re-armed after each answer,
// so slow answers never pile up. poll: called by the timer, not by an
// action or a route change.
async function refresh(poll) {
  clearTimeout(timer);
  const mine = gen;
  const v = view;
  try {
    if (who === null) {
      who = await whoami();
      v.built = false;
    }
    if (mine !== gen) return;
    renderWho();
    if (!v.built) build(v);
    const node = await (v.id && pages[v.page].detail ? pages[v.page].detail(v) : pages[v.page].load(v));
    if (mine !== gen) return;
    form.hidden = true;
    // Text selected on the page (an error, a payload, to copy) would go
    // with the nodes that hold it: a poll leaves the page as it is while
    // the selection lasts. An action's refresh still shows its effect.
    if (poll && selecting(v.data)) {
      setStatus("Showing the answer of " + clock(v.answered) + ": updates wait while text is selected.");
      return;
    }
    const focused = focusKey(v.data);
    v.data.replaceChildren();
    append(v.data, [node]);
    refocus(v, focused);
    v.answered = new Date();
    updated();
  } catch (err) {
    if (mine !== gen) return;
    if (!(err instanceof AuthError || err instanceof APIError) || err.status >= 500) {
      // The server is down, restarting or failing: what shows is its
      // last answer, which must not pass for a live one.
      const what = err instanceof APIError ? "The server answered " + err.status + " (" + err.message + ")"
        : "The server is not answering (" + err.message + ")";
      setStatus(what + (v.answered ? "; what shows is its last answer, from " + clock(v.answered) + "." : "; nothing to show yet.") +
        ($("live").checked ? " Trying again every " + pollMs / 1000 + " s." : ""), true);
      v.data.classList.add("stale");
      return;
    }
    v.data.classList.remove("stale");
    if (err instanceof AuthError) {
      showAuth(err.message);
      v.data.replaceChildren();
    } else if (err.unavailable) {
      v.data.replaceChildren(el("p", { class: "empty", text: "Not available on this server (" + err.message + ")." }));
      updated();
    } else {
      // Said where the page would be (a job or entry that is gone, a bad
      // filter), with the way back, not only in the status line.
      setStatus("Error: " + err.message, true);
      v.data.replaceChildren(el("p", { class: "empty", "data-error": err.status }, err.message + ". ",
        link("#/" + v.page, v.id ? "Back to the list" : "Clear the filters")));
    }
  } finally {
    if (mine === gen && $("live").checked) timer = setTimeout(() => refresh(true), pollMs);
  }
}

function setStatus(text, isError) {
  statusLine.textContent = text;
  statusLine.classList.toggle("error", !!isError);
}

// clock is a time of day with the zone: an operator may compare it with
// logs kept in another.
function clock(t) {
  return t.toLocaleTimeString([], { timeZoneName: "short" });
}

// updated says when the page's data was read.
function updated() {
  setStatus("Updated " + clock(new Date()));
  view.data.classList.remove("stale");
}

function selecting(root) {
  const s = getSelection();
  return s !== null && !s.isCollapsed && root.contains(s.anchorNode);
}

// focusKey names the control inside root that has the focus by what
// tells it from the others once the page is rendered again: its link,
// its text, and the data attributes of it and its ancestors (a row's
// entry, an action's name). null when the focus is elsewhere.
function focusKey(root) {
  const e = document.activeElement;
  return e && e !== root && root.contains(e) ? keyOf(e, root) : null;
}

function keyOf(e, root) {
  const parts = [e.getAttribute("href") || "", e.textContent];
  for (let n = e; n && n !== root; n = n.parentElement) parts.push(n.tagName + JSON.stringify({ ...n.dataset }));
  return parts.join("|");
}

// refocus gives the focus, in the page just rendered, to the control
// an action named (v.focus) or else to the one that had it before; a
// keyboard user would otherwise be sent back to the top of the page at
// every poll.
function refocus(v, key) {
  let target = v.focus ? v.data.querySelector(v.focus) : null;
  v.focus = null;
  if (!target && key !== null) {
    target = [...v.data.querySelectorAll("a, button, input, select, textarea")].find((e) => keyOf(e, v.data) === key);
  }
  if (target) target.focus({ preventScroll: true });
}

async function whoami() {
  try {
    return await api("GET", "v1/whoami");
  } catch (err) {
    if (err instanceof APIError && err.unavailable) return { name: "", role: "operate" };
    throw err;
  }
}

function renderWho() {
  const w = $("who");
  if (!who || !who.name) return w.replaceChildren();
  w.replaceChildren(who.name, el("span", { class: "role", text: who.role }));
}

function showAuth(message) {
  form.hidden = false;
  who = null;
  setStatus(message);
}

form.addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(tokenKey, input.value);
  input.value = "";
  who = null;
  refresh();
});

$("live").addEventListener("change", () => refresh());
window.addEventListener("hashchange", onRoute);

// filterForm builds a page's filters from the hash's parameters; applying
// it changes the hash (so the view can be linked and reloaded) and drops
// any page cursor.
function filterForm(page, v, specs) {
  const inputs = {};
  const f = el("form", { class: "filters", "data-filters": page });
  for (const s of specs) {
    let i;
    if (s.options) {
      i = el("select", { name: s.name }, s.options.map((o) => el("option", { value: o, text: o || "any" })));
    } else {
      i = el("input", { type: "text", name: s.name, placeholder: "any", list: s.list });
    }
    i.value = v.params.get(s.name) || s.fallback || "";
    inputs[s.name] = i;
    f.append(el("label", {}, s.label || s.name, i));
  }
  f.append(el("button", { type: "submit" }, "Filter"));
  f.append(el("button", {
    type: "button", class: "secondary",
    onclick: () => setHash(page, {}),
  }, "Clear"));
  f.addEventListener("submit", (e) => {
    e.preventDefault();
    const p = {};
    for (const [k, i] of Object.entries(inputs)) p[k] = i.value.trim();
    setHash(page, p);
  });
  return f;
}

function filtersOf(v, names) {
  const out = {};
  for (const n of names) out[n] = v.params.get(n) || "";
  return out;
}

// pager: "first page" and "next page" links for a keyset list.
function pager(page, v, filters, next) {
  const links = [];
  if (v.params.get("after")) links.push(link("#/" + page + query(filters), "← first page"));
  if (next) links.push(link("#/" + page + query({ ...filters, after: next }), "next page →"));
  return links.length ? el("div", { class: "pager" }, links) : null;
}

// ---------------------------------------------------------------------
// Queues.

// rates keeps each queue's counter samples of the last rateWindowS, to
// compute arrival and completion rates; a counter that goes down (a
// reset) restarts the window.
const rates = new Map();

function sampleRates(q) {
  if (typeof q.arrived_total !== "number" || typeof q.finished_total !== "number") return null;
  const now = Date.now() / 1000;
  let h = rates.get(q.queue) || [];
  const last = h[h.length - 1];
  if (last && (q.arrived_total < last.a || q.finished_total < last.f)) h = [];
  h.push({ t: now, a: q.arrived_total, f: q.finished_total });
  h = h.filter((s) => s.t >= now - rateWindowS);
  rates.set(q.queue, h);
  const first = h[0];
  const span = now - first.t;
  if (h.length < 2 || span < 1) return { measuring: true };
  return { arrive: ((q.arrived_total - first.a) / span) * 60, finish: ((q.finished_total - first.f) / span) * 60, span };
}

function perMin(r) {
  return r < 10 ? r.toFixed(1) : Math.round(r).toLocaleString("en-US");
}

// trend says what the rates imply for the queue's backlog.
function trend(r, backlog) {
  if (!r) return el("span", { class: "muted", text: "—" });
  if (r.measuring) return el("span", { class: "muted", text: "measuring…" });
  const net = r.arrive - r.finish;
  if (Math.abs(net) < 0.05) return el("span", { class: "trend", text: backlog > 0 ? "steady" : "idle" });
  if (net > 0) return el("span", { class: "trend grows", text: "grows by " + perMin(net) + "/min" });
  if (backlog === 0) return el("span", { class: "trend", text: "empty" });
  return el("span", { class: "trend drains", text: "drains in " + Math.max(1, Math.ceil(backlog / -net)) + " min" });
}

const queuesPage = {
  async load() {
    const body = await api("GET", "v1/queues");
    const rows = body.items.map((q) => {
      const j = q.jobs || {};
      const r = sampleRates(q);
      const backlog = ["waiting", "queued", "retrying", "running", "reserved"].reduce((a, s) => a + (j[s] || 0), 0);
      const parked = Object.values(q.dlq || {}).reduce((a, b) => a + b, 0);
      const conc = q.concurrency ? " / " + q.concurrency : "";
      return el("tr", { "data-queue": q.queue },
        td(link("#/jobs" + query({ queue: q.queue }), q.queue)),
        td(q.paused ? badge("paused") : badge("active", "ok")),
        td(j.waiting || 0), td(j.queued || 0), td(j.retrying || 0),
        td((j.running || 0) + conc, "num"), td(j.reserved || 0),
        td(link("#/jobs" + query({ queue: q.queue, state: "dead" }), count(q.dead)), q.dead > 0 ? "num bad" : "num"),
        td(link("#/dlq" + query({ queue: q.queue }), count(parked)), parked > 0 ? "num bad" : "num"),
        // 0: the queue has no such job (the API's zero), not one of no age.
        td(q.oldest_runnable_age_seconds > 0 ? age(q.oldest_runnable_age_seconds) : "—", "num"),
        td(q.oldest_waiting_age_seconds > 0 ? age(q.oldest_waiting_age_seconds) : "—", "num"),
        td(r && !r.measuring ? perMin(r.arrive) : "—", "num"),
        td(r && !r.measuring ? perMin(r.finish) : "—", "num"),
        // A paused queue's backlog waits for its resume, not for its rate.
        td(q.paused && backlog > 0 ? el("span", { class: "trend grows", text: "held: paused" }) : trend(r, backlog)),
        canOperate() ? td(q.paused
          ? actionButton("Resume", "v1/queues/" + encodeURIComponent(q.queue) + "/resume", { name: "resume" })
          : actionButton("Pause", "v1/queues/" + encodeURIComponent(q.queue) + "/pause", { name: "pause", cls: "danger" })) : null);
    });
    const headers = ["queue", "state", ["waiting", "num"], ["queued", "num"], ["retrying", "num"],
      ["running / max", "num"], ["reserved", "num"], ["dead", "num"], ["DLQ", "num"],
      ["oldest runnable", "num"], ["oldest waiting", "num"], ["arrived /min", "num"], ["finished /min", "num"], "trend"];
    if (canOperate()) headers.push("");
    const spans = [...rates.values()].map((h) => h.length > 1 ? h[h.length - 1].t - h[0].t : 0);
    const span = Math.max(0, ...spans);
    return [el("h1", { text: "Queues" }), table(headers, rows, "no queues"),
      el("p", { class: "kindnote", text: span >= 1
        ? "Rates over the last " + age(span) + " of this page's polls (up to 5 min)."
        : "Rates are measured from this page's polls: they show from the next one on." })];
  },
};

// ---------------------------------------------------------------------
// Jobs.

const jobStates = ["", "waiting", "queued", "running", "retrying", "succeeded", "dead", "cancelled", "skipped", "expired", "coalesced"];
const cancellable = ["waiting", "queued", "running", "retrying"];

const jobsPage = {
  setup(v) {
    if (v.id) return null;
    const confirm = el("div", { id: "bulk" });
    const f = filterForm("jobs", v, [
      { name: "state", options: jobStates }, { name: "queue" }, { name: "route" }, { name: "key" }]);
    const state = v.params.get("state") || "";
    if (canOperate() && (state === "" || cancellable.includes(state))) f.append(bulkButton(v, confirm, bulkActions.cancel));
    return [el("h1", { text: "Jobs" }), f, confirm];
  },
  async load(v) {
    const f = filtersOf(v, ["state", "queue", "route", "key"]);
    const body = await api("GET", "v1/jobs" + query({ ...f, limit: 50, after: v.params.get("after") }));
    const rows = body.items.map((j) => el("tr", { "data-job": j.id },
      td(link("#/jobs/" + j.id, String(j.id))), td(j.kind), td(j.queue), td(j.route), keyCell(j.key),
      td(badge(j.state)), td(j.attempts + " / " + j.max_attempts, "num"), td(when(j.created_at)),
      td(j.state === "queued" || j.state === "retrying" ? when(j.scheduled_at) : when(j.finished_at || j.started_at)),
      errCell(j.last_error)));
    return [table([["id", "num"], "kind", "queue", "route", "key", "state", ["attempts", "num"], "created",
      "scheduled / last change", "last error"], rows, "no jobs match"), pager("jobs", v, f, body.next)];
  },
  async detail(v) {
    const j = await api("GET", "v1/jobs/" + encodeURIComponent(v.id));
    const buttons = [];
    if (cancellable.includes(j.state)) {
      buttons.push(actionButton("Cancel", "v1/jobs/" + j.id + "/cancel", { cls: "danger", name: "cancel",
        ask: "Cancel job " + j.id + "? It will never run again" + (j.state === "running" ? " (its running attempt is stopped)" : "") +
          "; a cancel cannot be undone.",
        yes: "Cancel job " + j.id, no: "Keep it", done: () => "Job " + j.id + " cancelled." }));
    }
    const delayed = j.state === "queued" && new Date(j.scheduled_at) > new Date();
    if (j.state === "retrying" || delayed) buttons.push(actionButton("Retry now", "v1/jobs/" + j.id + "/retry", { name: "retry", done: () => "Job " + j.id + " is runnable now." }));
    // A dead job is re-driven from its DLQ entry, here as on the entry's
    // page (which also discards it): the Lanes page sends a blocked
    // lane's dead head here.
    const entry = j.dlq_entry_id;
    if (entry !== null && entry !== undefined) {
      buttons.push(actionButton("Re-drive", "v1/dlq/" + entry + "/redrive", { name: "redrive", done: () => "Entry " + entry + " re-driven." }));
    }
    // A re-drive counts the attempts from 1 again.
    const redrives = j.redrives || [];
    const since = redrives.length ? " since its last re-drive" : "";
    const out = [
      el("h1", {}, link("#/jobs", "Jobs"), " › job " + j.id + " ", badge(j.state)),
      el("div", { class: "actions" }, buttons),
      section("Job", fields([
        ["kind", j.kind], ["queue", link("#/jobs" + query({ queue: j.queue }), j.queue)], ["route", j.route], ["key", j.key],
        ["version", j.version === null ? null : String(j.version)], ["attempts", j.attempts + " of " + j.max_attempts + since],
        ["created", whenAt(j.created_at)], ["scheduled", whenAt(j.scheduled_at)], ["started", j.started_at ? whenAt(j.started_at) : null],
        ["finished", j.finished_at ? whenAt(j.finished_at) : null],
        ["source", j.source ? j.source.topic + " / partition " + j.source.partition + " @ offset " + j.source.offset : "enqueued through the API"],
        ["DLQ entry", entry === null || entry === undefined ? null
          : el("span", {}, link("#/dlq/" + entry, "entry " + entry), " (re-drive it, or discard it there)")],
        ["last error", j.last_error ? el("span", { class: "bad", text: j.last_error }) : null]])),
    ];
    if (j.lane) {
      const l = j.lane;
      // A waiting job with nothing ahead is not the head when the lane
      // has none: a strict lane holding for a missing version (gap says
      // which), or briefly one whose next job was cancelled as its head
      // ended.
      const headless = l.gap
        ? el("span", {}, "next in its lane, which has no head: it holds for version " + l.gap.awaited_version +
          ", missing, until ", when(l.gap.until), ", then " +
          (l.gap.policy === "proceed" ? "runs its next job anyway" : "parks its next job") + " (gap_policy " + l.gap.policy + ")")
        : "next in its lane, which has no head: the rescuer's next pass over the lanes promotes its next job";
      out.push(section("Lane", fields([
        ["position", l.position > 0 ? l.position + " job" + (l.position === 1 ? "" : "s") + " ahead of it"
          : l.head_job_id === j.id ? "the head of its lane"
          : l.head_job_id === null ? headless
          : "in its lane"],
        ["waiting", l.waiting + (l.head_job_id === null ? " waiting" : " behind the head")], ["head", jobLink(l.head_job_id)],
        ["blocked", l.blocked ? badge("blocked") : "no"],
        ["last applied version", l.last_applied_version === null ? null : String(l.last_applied_version)]])));
    }
    if (j.group) {
      // A held job's state reads queued: this says what it waits for.
      const g = j.group;
      out.push(section("Group", fields([
        ["group", g.value], ["running", g.running + " of its max_running " + g.max_running],
        ["held", g.held ? el("span", {}, badge("held"), " by the group's cap until one of its running jobs ends") : "no"]])));
    }
    out.push(section("Payload", j.payload_base64 === undefined
      ? el("p", { class: "empty", text: "This server does not show job payloads." }) : payloadBlock(j.payload_base64, "payload")));
    if (j.headers !== undefined) out.push(section("Headers", headersTable(j.headers)));
    out.push(section("Attempts", el("p", { class: "kindnote", text: j.attempts + " attempt" + (j.attempts === 1 ? "" : "s") + " of " + j.max_attempts + since }),
      el("div", { id: "attempts" }, errorsTable(j.errors, redrives))));
    if (j.result) {
      out.push(section("Result", el("p", { class: "kindnote", text: (j.result.content_type || "no content type") }),
        payloadBlock(j.result.body_base64, "result")));
    }
    return out;
  },
};

// ---------------------------------------------------------------------
// DLQ.

const reasons = ["", "decode", "missing_field", "too_large", "permanent", "max_attempts", "gap"];

function entryState(e) {
  if (!e.redriven) return badge("parked");
  return el("span", {}, badge("redriven"), " → ", jobLink(e.redriven.job_id), " ", e.redriven.job_state ? badge(e.redriven.job_state) : null);
}

const dlqPage = {
  setup(v) {
    if (v.id) return null;
    const confirm = el("div", { id: "bulk" });
    const f = filterForm("dlq", v, [{ name: "reason", options: reasons }, { name: "route" }, { name: "queue" },
      // No "any": the API's default is parked, and the select says so.
      { name: "state", options: ["parked", "redriven", "all"], fallback: "parked", label: "state" }]);
    const state = v.params.get("state") || "parked";
    if (canOperate() && state === "parked") {
      for (const b of [bulkActions.redrive, bulkActions.discard]) f.append(bulkButton(v, confirm, b));
    }
    return [el("h1", { text: "Dead-letter queue" }), f, confirm];
  },
  async load(v) {
    const f = filtersOf(v, ["reason", "route", "queue", "state"]);
    const body = await api("GET", "v1/dlq" + query({ ...f, limit: 50, after: v.params.get("after") }));
    const rows = body.items.map((e) => el("tr", { "data-entry": e.id },
      td(link("#/dlq/" + e.id, String(e.id))), td(badge(e.reason, "dead")), td(e.route), td(e.queue), td(jobLink(e.job_id)),
      td(e.source ? e.source.topic + "/" + e.source.partition + "@" + e.source.offset : "—"), td(e.attempts),
      errCell(e.last_error), td(when(e.created_at)), td(entryState(e)),
      canOperate() ? td(e.redriven ? null : el("div", { class: "actions" },
        actionButton("Re-drive", "v1/dlq/" + e.id + "/redrive", { name: "redrive", done: () => "Entry " + e.id + " re-driven." }))) : null));
    const headers = [["id", "num"], "reason", "route", "queue", "job", "source", ["attempts", "num"], "last error", "parked", "state"];
    if (canOperate()) headers.push("");
    return [table(headers, rows, "no entries match"), pager("dlq", v, f, body.next)];
  },
  async detail(v) {
    const e = await api("GET", "v1/dlq/" + encodeURIComponent(v.id));
    const buttons = e.redriven ? [] : [
      actionButton("Re-drive", "v1/dlq/" + e.id + "/redrive", { name: "redrive", done: () => "Entry " + e.id + " re-driven." }),
      actionButton("Discard", "v1/dlq/" + e.id + "/discard", { cls: "danger", name: "discard",
        ask: "Discard entry " + e.id + " for good? Its record will not be made a job again.",
        done: () => "Entry " + e.id + " discarded.",
        // The entry is gone: its page would answer 404 from now on.
        then: () => { carried = "Entry " + e.id + " discarded."; setHash("dlq", {}); } })];
    const out = [
      el("h1", {}, link("#/dlq", "DLQ"), " › entry " + e.id + " ", e.redriven ? badge("redriven") : badge("parked")),
      el("div", { class: "actions" }, buttons),
      section("Entry", fields([
        ["reason", badge(e.reason, "dead")], ["route", e.route], ["queue", e.queue], ["job", jobLink(e.job_id)],
        ["source", e.source ? e.source.topic + " / partition " + e.source.partition + " @ offset " + e.source.offset : null],
        ["attempts", String(e.attempts)], ["parked", whenAt(e.created_at)],
        ["last error", el("span", { class: "bad", text: e.last_error || "" })],
        ["truncated", e.truncated ? "yes: only the first bytes of a " + e.record_bytes + "-byte record are kept (a re-drive reads the record again)" : null]])),
    ];
    if (e.redriven) {
      const r = e.redriven;
      out.push(section("Re-driven", el("div", { id: "redriven" }, fields([["by", r.by], ["at", whenAt(r.at)], ["job", jobLink(r.job_id)],
        ["job state", r.job_state ? badge(r.job_state) : "pruned"]]))));
    }
    out.push(section("Payload", payloadBlock(e.payload_base64, "payload")));
    if (e.record_key_base64) out.push(section("Record key", payloadBlock(e.record_key_base64, "key")));
    out.push(section("Headers", headersTable(e.headers)));
    out.push(section("Error history", errorsTable(e.errors)));
    return out;
  },
};

// The bulk actions: each counts the items its filters match with GET
// <count>, acts with POST <post>?…&expect=N, and answers the number done
// under key.
const bulkActions = {
  redrive: { name: "redrive", count: "v1/dlq/count", post: "v1/dlq/redrive", filters: ["queue", "reason", "route"],
    verb: "Re-drive", past: "Re-drove", key: "redriven", what: "parked", one: "entry", many: "entries", warn: "", no: "Cancel" },
  discard: { name: "discard", count: "v1/dlq/count", post: "v1/dlq/discard", filters: ["queue", "reason", "route"],
    verb: "Discard", past: "Discarded", key: "discarded", what: "parked", one: "entry", many: "entries",
    warn: " They go for good: their records will not be made jobs again.", no: "Cancel" },
  cancel: { name: "cancel", count: "v1/jobs/count", post: "v1/jobs/cancel", filters: ["state", "queue", "route", "key"],
    verb: "Cancel", past: "Cancelled", key: "cancelled", what: "unfinished", one: "job", many: "jobs",
    warn: " They will never run (running ones are stopped); a cancel cannot be undone.", no: "Keep them" },
};

// bulkButton is the filter bar's button that asks for bulk action b.
function bulkButton(v, box, b) {
  return el("button", { type: "button", class: "danger", "data-action": b.name + "-all", onclick: () => bulkAsk(v, box, b) },
    b.verb + " all matching…");
}

// bulkAsk counts the items matching the filters, and asks for a
// confirmation that states the count; the action sends it as expect, so
// that the server refuses if the number changed meanwhile.
async function bulkAsk(v, box, b) {
  const f = filtersOf(v, b.filters);
  box.replaceChildren(el("div", { class: "confirm", text: "Counting…" }));
  let n;
  try {
    n = (await api("GET", b.count + query(f))).count;
  } catch (err) {
    const na = err instanceof APIError && (err.unavailable || err.field === "id");
    box.replaceChildren(el("div", { class: "confirm", text: na ? b.verb + " all is not available on this server." : "Failed: " + err.message }));
    return;
  }
  const desc = Object.entries(f).filter(([, x]) => x).map(([k, x]) => k + " = " + x).join(", ");
  const noun = (k) => (k === 1 ? b.one : b.many);
  const items = (k) => k + " " + noun(k);
  if (n === 0) {
    box.replaceChildren(el("div", { class: "confirm", text: "No " + b.what + " " + b.many + " match" + (desc ? " (" + desc + ")" : "") + "." }));
    return;
  }
  box.replaceChildren(el("div", { class: "confirm", "data-count": n },
    el("span", { text: b.verb + " all " + n + " " + b.what + " " + noun(n) + (desc ? " matching " + desc : "") + "?" + b.warn }),
    el("button", {
      class: "danger", "data-action": b.name + "-all-confirm",
      onclick: async (e) => {
        e.currentTarget.disabled = true;
        try {
          const r = await api("POST", b.post + query({ ...f, expect: n }));
          box.replaceChildren();
          const failed = r.failed || [];
          flash(b.past + " " + items(r[b.key]) +
            (failed.length ? "; " + failed.length + " failed: " + failed.map((x) => x.id + " (" + x.error + ")").join(", ") : "."), failed.length > 0);
          refresh();
        } catch (err) {
          if (err instanceof APIError && err.status === 409) {
            box.replaceChildren(el("div", { class: "confirm", text: "The number matching changed: " + err.message + " Ask again." }));
          } else {
            box.replaceChildren(el("div", { class: "confirm", text: "Failed: " + err.message }));
          }
        }
      },
    }, b.verb + " " + n),
    el("button", { class: "secondary", onclick: () => box.replaceChildren() }, b.no)));
}

// ---------------------------------------------------------------------
// Lanes.

const lanesPage = {
  setup(v) {
    return [el("h1", { text: "Lanes" }), filterForm("lanes", v, [{ name: "route" }])];
  },
  async load(v) {
    const f = filtersOf(v, ["route"]);
    const after = v.params.get("after");
    const body = await api("GET", "v1/lanes" + query({ ...f, limit: 50, after }));
    const row = (l) => el("tr", { "data-lane": l.route + "/" + l.key },
      td(l.route), keyCell(l.key, link("#/jobs" + query({ route: l.route, key: l.key }), l.key)), td(jobLink(l.head_job_id)),
      td(l.head_state ? badge(l.head_state) : "—"), td(l.waiting), td(age(l.oldest_waiting_age_seconds), "num"));
    const headers = ["route", "key", "head", "head state", ["waiting", "num"], ["oldest waiting", "num"]];
    // One list, paged: its blocked lanes first, then the others, longest
    // first. So the first page says whether any lane is blocked, and a
    // page that ends the list whether any other lane has jobs waiting; a
    // page between shows the parts it holds. (A cursor past the end, from
    // an old link, finds nothing, which says neither.)
    const blocked = body.items.filter((l) => l.blocked);
    const longest = body.items.filter((l) => !l.blocked);
    const out = [];
    if (after && body.items.length === 0) {
      out.push(el("p", { class: "empty", text: "no more lanes" }));
    } else {
      if (!after || blocked.length) {
        out.push(el("h2", { text: "Blocked lanes: a dead head holds each until it is re-driven or discarded" }),
          el("div", { id: "blocked" }, table(headers, blocked.map(row), "no blocked lanes")));
      }
      if (!body.next || longest.length) {
        out.push(el("h2", { text: "Longest lanes" }),
          el("div", { id: "longest" }, table(headers, longest.map(row), "no lanes with waiting jobs")));
      }
    }
    out.push(pager("lanes", v, f, body.next));
    return out;
  },
};

// ---------------------------------------------------------------------
// Schedules.

const schedulesPage = {
  async load() {
    const body = await api("GET", "v1/schedules");
    const rows = body.items.map((s) => {
      const base = "v1/schedules/" + encodeURIComponent(s.name);
      return el("tr", { "data-schedule": s.name },
        td(s.name), td(el("code", { text: s.cron })), td(s.timezone || "UTC"), td(s.kind), td(link("#/jobs" + query({ queue: s.queue }), s.queue)),
        td(link("#/jobs" + query({ route: s.route }), s.route)),
        td(s.paused ? badge("paused") : badge("active", "ok")), td(when(s.next_slot)), td(when(s.last_slot)),
        td(s.last_job_id ? el("span", {}, jobLink(s.last_job_id), " ", s.last_job_state ? badge(s.last_job_state) : null) : "—"),
        canOperate() ? td(el("div", { class: "actions" },
          s.paused ? actionButton("Resume", base + "/resume", { name: "resume" }) : actionButton("Pause", base + "/pause", { name: "pause", cls: "danger" }),
          actionButton("Trigger now", base + "/trigger", { name: "trigger", done: (r) => "Schedule " + s.name + " triggered: job " + (r.job ? r.job.id : "?") + "." }))) : null);
    });
    const headers = ["name", "cron", "time zone", "kind", "queue", "route", "state", "next slot", "last slot", "last job"];
    if (canOperate()) headers.push("");
    return [el("h1", { text: "Schedules" }), table(headers, rows, "no schedules configured")];
  },
};

// ---------------------------------------------------------------------
// Kafka.

function filterText(f) {
  if (!f) return "every record";
  return (f.header ? "header " + f.header : "field " + f.field) + " in [" + f.in.join(", ") + "]";
}

function limitsText(l) {
  if (!l) return null;
  const parts = [];
  if (l.max_running) parts.push("max_running " + l.max_running);
  if (l.group) parts.push("group " + (l.group.header ? "header " + l.group.header : "field " + l.group.field) + " max_running " + l.group.max_running);
  if (l.rate_limit) parts.push("rate " + l.rate_limit.limit + " per " + l.rate_limit.per + " (burst " + l.rate_limit.burst + ")");
  return parts.join(" · ");
}

const kafkaPage = {
  async load() {
    const body = await api("GET", "v1/routes");
    if (body.items.length === 0) return [el("h1", { text: "Kafka" }), el("p", { class: "empty", text: "no routes configured" })];
    const cards = body.items.map((r) => {
      const base = "v1/routes/" + encodeURIComponent(r.name);
      const status = [];
      if (r.paused) status.push(badge("paused"));
      if (r.backpressured) status.push(badge("backpressured"));
      if (r.held_by && r.held_by.length) status.push(badge("held by " + r.held_by.join(", "), "held"));
      if (!status.length) status.push(badge("fetching", "ok"));
      const lag = r.lag ? count(r.lag.records) + " records" + (typeof r.lag.seconds === "number" ? " · " + age(r.lag.seconds) : "") : null;
      const parts = r.lag ? table([["partition", "num"], ["stored offset", "num"], ["end offset", "num"], ["lag", "num"]],
        r.lag.partitions.map((p) => el("tr", {}, td(p.partition), td(p.stored === null ? "not yet" : count(p.stored), "num"), td(count(p.end), "num"),
          td(count(p.lag), p.lag > 0 ? "num bad" : "num"))), "no partitions") : null;
      return el("section", { class: "card", "data-route": r.name },
        el("h2", {}, r.name + " ", status),
        el("div", { class: "actions" }, canOperate() ? (r.paused ? actionButton("Resume", base + "/resume", { name: "resume" })
          : actionButton("Pause", base + "/pause", { name: "pause", cls: "danger" })) : null),
        fields([["topic", el("code", { text: r.topic })], ["queue", link("#/queues", r.queue)], ["filter", filterText(r.filter)],
          ["limits", limitsText(r.limits)], ["lag", lag], ["lag error", r.lag_error ? el("span", { class: "bad", text: r.lag_error }) : null]]),
        parts ? el("h2", { text: "Partitions" }) : null, parts);
    });
    return [el("h1", { text: "Kafka" }), cards];
  },
};

// ---------------------------------------------------------------------
// Audit.

function targetLink(target) {
  const m = /^(job|dlq)\/(\d+)$/.exec(target || "");
  if (!m) return target;
  return link("#/" + (m[1] === "job" ? "jobs" : "dlq") + "/" + m[2], target);
}

const auditActions = ["", "cancel", "redrive", "discard", "pause", "resume", "trigger", "enqueue", "retry", "replay"];

// detailClip is how many characters of an audit detail's value show; the
// rest is in the value's tooltip.
const detailClip = 60;

// clipped is text cut at n characters (not inside a surrogate pair) with
// an ellipsis, whole in its tooltip.
function clipped(tag, text, n) {
  const chars = Array.from(text);
  if (chars.length <= n) return el(tag, { text });
  return el(tag, { title: text, text: chars.slice(0, n).join("") + "…" });
}

// auditDetail shows what an action recorded as "key: value" pairs. The
// values come from records and operators (a kind, a queue's name): text,
// in a <bdi> so that right-to-left text in one cannot reorder the rest; a
// job id links to its job; anything else not a string shows as compact
// JSON.
function auditDetail(detail) {
  if (detail === null || typeof detail !== "object" || Array.isArray(detail)) {
    return clipped("code", JSON.stringify(detail === undefined ? null : detail), detailClip);
  }
  const pairs = Object.entries(detail);
  if (pairs.length === 0) return el("span", { class: "muted", text: "—" });
  // A space between the pairs too, for who copies the text.
  return el("span", { class: "detail" }, pairs.map(([k, v], i) => [i > 0 ? " " : null, el("span", { class: "kv", "data-key": k },
    el("span", { class: "k", text: k + ":" }), " ",
    k === "job_id" && Number.isSafeInteger(v) ? link("#/jobs/" + v, String(v)) : clipped("bdi", typeof v === "string" ? v : JSON.stringify(v), detailClip))]));
}

const auditPage = {
  setup(v) {
    return [el("h1", { text: "Audit log" }), filterForm("audit", v, [{ name: "actor" }, { name: "action", options: auditActions }, { name: "target" }])];
  },
  async load(v) {
    const f = filtersOf(v, ["actor", "action", "target"]);
    const body = await api("GET", "v1/audit" + query({ ...f, limit: 50, after: v.params.get("after") }));
    const rows = body.items.map((a) => el("tr", {}, td(a.id), td(when(a.at)), td(a.actor), td(badge(a.action)),
      td(targetLink(a.target)), td(auditDetail(a.detail), "wrap")));
    return [table([["id", "num"], "at", "actor", "action", "target", "detail"], rows, "no actions recorded"),
      pager("audit", v, f, body.next)];
  },
};

const pages = {
  queues: queuesPage, jobs: jobsPage, dlq: dlqPage, lanes: lanesPage,
  schedules: schedulesPage, kafka: kafkaPage, audit: auditPage,
};

onRoute();
