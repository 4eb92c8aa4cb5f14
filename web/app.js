// sluice's chat page: plain JavaScript, no build step, nothing loaded from outside the server.
// Chat: POST /v1/chat/completions with stream=true, the SSE stream read from fetch's body (an
// EventSource cannot POST). Every reply shows the server's exactness record: token_sha (SHA-256 of
// the generated token ids) and the speculative telemetry from the "sluice" object of the last chunk.
// Monitor: GET /metrics (Prometheus text) every few seconds while its tab is open.
"use strict";

const $ = (id) => document.getElementById(id);

const state = {
  messages: [],        // the conversation: [{role, content}], the system prompt is added per request
  model: null,         // id from /v1/models (null until read: the server then uses its only model)
  specRequest: null,   // how a request turns drafting on, read from /openapi.json; null: not per request
  controller: null,    // AbortController of the reply being streamed, null when idle
};

// ---------------------------------------------------------------------------------------------
// Server-Sent Events (the HTML standard's framing): an event ends at a blank line, the "data:"
// lines of one event are joined with "\n", lines starting with ":" are comments, and one space
// after the colon is dropped. Bytes arrive in arbitrary pieces, so a line may span two reads.
class SseParser {
  constructor(onEvent) {
    this.buffer = "";
    this.data = [];
    this.event = "message";
    this.onEvent = onEvent;
  }

  push(text) {
    this.buffer += text;
    let end;
    while ((end = this.buffer.indexOf("\n")) >= 0) {
      let line = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 1);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      this.line(line);
    }
  }

  line(line) {
    if (line === "") {
      // Blank line: dispatch. An event with no data lines is not dispatched (the standard's rule).
      if (this.data.length > 0) this.onEvent({ event: this.event, data: this.data.join("\n") });
      this.data = [];
      this.event = "message";
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.event = value;
  }
}

// ---------------------------------------------------------------------------------------------
// HTTP helpers

function authHeaders() {
  const key = $("api-key").value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// An OpenAI-style error body ({"error": {"message", ...}}) as one line, else the status text.
async function errorMessage(res) {
  const text = await res.text();
  try {
    const body = JSON.parse(text);
    if (body && body.error && body.error.message) return `${res.status}: ${body.error.message}`;
  } catch (_) { /* not JSON: show the text */ }
  return `${res.status} ${res.statusText}${text ? ": " + text.slice(0, 300) : ""}`;
}

// Resolves a local "$ref" ("#/components/schemas/X") of the OpenAPI document.
function resolveRef(doc, schema) {
  let s = schema;
  for (let i = 0; s && s.$ref && i < 16; i++) {
    s = s.$ref.replace(/^#\//, "").split("/").reduce((node, key) => (node ? node[key] : undefined), doc);
  }
  return s || {};
}

// The server's own OpenAPI document says whether a chat request can ask for drafting: a boolean
// "spec", a "drafter" enum, or either inside a "sluice" object. The toggle is shown only then.
function findSpecRequest(doc) {
  const op = doc && doc.paths && doc.paths["/v1/chat/completions"] && doc.paths["/v1/chat/completions"].post;
  const media = op && op.requestBody && op.requestBody.content && op.requestBody.content["application/json"];
  if (!media) return null;
  const props = resolveRef(doc, media.schema).properties || {};
  const pick = (p, path) => {
    if (p.spec) return { path: path.concat("spec"), on: true, off: false };
    if (p.drafter) {
      const values = resolveRef(doc, p.drafter).enum || [];
      const on = values.find((v) => v !== "none") || "ngram";
      return { path: path.concat("drafter"), on, off: "none" };
    }
    return null;
  };
  const top = pick(props, []);
  if (top) return top;
  if (props.sluice) return pick(resolveRef(doc, props.sluice).properties || {}, ["sluice"]);
  return null;
}

function setPath(obj, path, value) {
  let node = obj;
  for (const key of path.slice(0, -1)) node = node[key] = node[key] || {};
  node[path[path.length - 1]] = value;
}

// ---------------------------------------------------------------------------------------------
// Start-up: the model name, readiness, and whether drafting can be asked for per request.

async function loadServerInfo() {
  try {
    const res = await fetch("/v1/models", { headers: authHeaders() });
    if (res.ok) {
      const body = await res.json();
      if (body.data && body.data.length) {
        state.model = body.data[0].id;
        $("model-name").textContent = state.model;
      }
    } else {
      $("model-name").textContent = await errorMessage(res);
    }
  } catch (e) {
    $("model-name").textContent = "server unreachable";
  }
  try {
    const res = await fetch("/openapi.json");
    if (res.ok) state.specRequest = findSpecRequest(await res.json());
  } catch (_) { /* no document: no toggle */ }
  $("spec-field").hidden = state.specRequest === null;
}

async function pollReady() {
  let ready = false;
  try {
    const res = await fetch("/ready");
    ready = res.ok;
    let phase = "";
    try { phase = (await res.json()).phase || ""; } catch (_) { /* plain text body */ }
    $("server-state").textContent = ready ? "ready" : `not ready${phase ? " (" + phase + ")" : ""}`;
  } catch (_) {
    $("server-state").textContent = "server unreachable";
  }
  $("server-state").dataset.ready = String(ready);
  setTimeout(pollReady, ready ? 15000 : 2000);
}

// ---------------------------------------------------------------------------------------------
// Chat

// "a, \n\n" -> ["a", "\n\n"]: comma separated, "\n" and "\t" written as escapes, at most 4 (OpenAI).
function parseStops(text) {
  return text.split(",")
    .map((s) => s.trim().replace(/\\n/g, "\n").replace(/\\t/g, "\t"))
    .filter((s) => s.length > 0)
    .slice(0, 4);
}

function requestBody() {
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...state.messages);
  const body = {
    messages,
    stream: true,
    stream_options: { include_usage: true },
  };
  if (state.model) body.model = state.model;
  const temperature = parseFloat($("temperature").value);
  if (Number.isFinite(temperature)) body.temperature = temperature;
  const seed = parseInt($("seed").value, 10);
  if (Number.isFinite(seed)) body.seed = seed;
  const maxTokens = parseInt($("max-tokens").value, 10);
  if (Number.isFinite(maxTokens)) body.max_tokens = maxTokens;
  const stops = parseStops($("stop").value);
  if (stops.length) body.stop = stops;
  if (state.specRequest) {
    setPath(body, state.specRequest.path, $("spec").checked ? state.specRequest.on : state.specRequest.off);
  }
  return body;
}

// One message in the log; returns the elements a streamed reply fills in.
function addMessage(role, text) {
  const article = document.createElement("article");
  article.className = `msg ${role}`;
  const who = document.createElement("h2");
  who.className = "who";
  who.textContent = role === "user" ? "You" : "Assistant";
  const reasoning = document.createElement("details");
  reasoning.className = "reasoning";
  reasoning.hidden = true;
  const summary = document.createElement("summary");
  summary.textContent = "Reasoning";
  const reasoningText = document.createElement("div");
  reasoningText.className = "text";
  reasoning.append(summary, reasoningText);
  const content = document.createElement("div");
  content.className = "content text";
  content.textContent = text;
  const meta = document.createElement("div");
  meta.className = "meta";
  article.append(who, reasoning, content, meta);
  $("log").append(article);
  article.scrollIntoView({ block: "end" });
  return { article, reasoning, reasoningText, content, meta };
}

function metaItem(label, value, cls) {
  const span = document.createElement("span");
  if (cls) span.className = cls;
  const b = document.createElement("b");
  b.textContent = label + " ";
  span.append(b, value);
  return span;
}

// The line under a reply: how it ended, its token count and speed, and the exactness record.
function renderMeta(view, r) {
  const items = [];
  if (r.finish) items.push(metaItem("finish", r.finish));
  const tokens = r.usage ? r.usage.completion_tokens : r.deltas;
  if (tokens !== undefined) items.push(metaItem("tokens", String(tokens)));
  if (r.usage && r.usage.prompt_tokens !== undefined) {
    const cached = r.usage.prompt_tokens_details && r.usage.prompt_tokens_details.cached_tokens;
    items.push(metaItem("prompt", `${r.usage.prompt_tokens}${cached ? ` (${cached} cached)` : ""}`));
  }
  const s = r.sluice;
  // The server's decode speed for this reply; without it, the browser's measure from the first
  // content delta to the last (network included).
  if (s && typeof s.decode_tok_s === "number" && s.decode_tok_s > 0) {
    items.push(metaItem("tok/s", s.decode_tok_s.toFixed(1)));
  } else if (r.firstAt && r.lastAt > r.firstAt && tokens > 1) {
    items.push(metaItem("tok/s", ((tokens - 1) / ((r.lastAt - r.firstAt) / 1000)).toFixed(1)));
  }
  // The seed the server used (it picks one when the request has none): with it, the reply can
  // be asked for again and comes back the same (E4).
  if (s && s.seed !== undefined && s.seed !== null) items.push(metaItem("seed", String(s.seed)));
  if (s && s.spec) {
    const spec = s.spec;
    const drafted = spec.drafter && spec.drafter !== "none";
    const acc = drafted && typeof spec.acceptance === "number" ? `${(spec.acceptance * 100).toFixed(0)}%` : "– (serial)";
    const item = metaItem("acceptance", acc, "acceptance");
    if (drafted) {
      item.title = `drafter ${spec.drafter}, ${spec.verify_steps} verify steps, ` +
        `${Number(spec.tokens_per_step).toFixed(2)} tokens/step, rows mean ${Number(spec.rows_mean).toFixed(2)}`;
    }
    items.push(item);
  }
  if (s && Array.isArray(s.exact)) items.push(metaItem("exact", s.exact.join(" ") || "none"));
  if (s && s.token_sha) {
    const code = document.createElement("code");
    code.className = "token-sha";
    code.textContent = s.token_sha;
    items.push(metaItem("token_sha", code, "sha"));
    view.article.dataset.tokenSha = s.token_sha;
  }
  view.meta.replaceChildren(...items);
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop-gen").disabled = !busy;
  $("prompt").setAttribute("aria-busy", String(busy));
}

async function send() {
  const text = $("prompt").value;
  if (!text.trim() || state.controller) return;
  $("prompt").value = "";
  state.messages.push({ role: "user", content: text });
  addMessage("user", text);
  const view = addMessage("assistant", "");
  view.article.dataset.state = "streaming";
  view.article.setAttribute("aria-busy", "true");  // screen readers read the reply once, when complete
  view.article.dataset.chunks = "0";
  const reply = { text: "", deltas: 0, finish: null, usage: null, sluice: null, firstAt: 0, lastAt: 0, tools: [] };
  state.controller = new AbortController();
  setBusy(true);
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify(requestBody()),
      signal: state.controller.signal,
    });
    if (!res.ok) throw new Error(await errorMessage(res));
    let sawDone = false;
    const parser = new SseParser((ev) => {
      if (ev.data === "[DONE]") { sawDone = true; return; }
      onChunk(view, reply, JSON.parse(ev.data));
    });
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.push(decoder.decode(value, { stream: true }));
    }
    parser.push(decoder.decode());
    if (!sawDone) throw new Error("the stream ended without data: [DONE]");
    view.article.dataset.state = "done";
  } catch (e) {
    const aborted = e.name === "AbortError";
    view.article.dataset.state = aborted ? "stopped" : "error";
    const err = document.createElement("p");
    err.className = "error";
    err.setAttribute("role", "alert");
    err.textContent = aborted ? "Stopped." : `Error: ${e.message}`;
    view.article.append(err);
  } finally {
    // Keep the turn when something came back; a turn that failed before any text is forgotten
    // so the next request does not carry two user messages in a row.
    if (reply.text || reply.tools.length || view.article.dataset.state === "done") {
      state.messages.push({ role: "assistant", content: reply.text });
    } else {
      state.messages.pop();
    }
    renderMeta(view, reply);
    view.article.setAttribute("aria-busy", "false");
    state.controller = null;
    setBusy(false);
    $("prompt").focus();
  }
}

function onChunk(view, reply, chunk) {
  if (chunk.error) throw new Error(chunk.error.message || JSON.stringify(chunk.error));
  for (const choice of chunk.choices || []) {
    const delta = choice.delta || {};
    if (delta.content) {
      const now = performance.now();
      if (!reply.firstAt) reply.firstAt = now;
      reply.lastAt = now;
      reply.text += delta.content;
      reply.deltas += 1;
      view.content.textContent = reply.text;
    }
    if (delta.reasoning_content) {
      view.reasoning.hidden = false;
      view.reasoningText.textContent += delta.reasoning_content;
    }
    for (const call of delta.tool_calls || []) {
      const i = call.index || 0;
      reply.tools[i] = reply.tools[i] || { name: "", arguments: "" };
      if (call.function && call.function.name) reply.tools[i].name += call.function.name;
      if (call.function && call.function.arguments) reply.tools[i].arguments += call.function.arguments;
      view.content.textContent = reply.text + reply.tools.map((t) => `\n[tool call] ${t.name}(${t.arguments})`).join("");
    }
    if (choice.finish_reason) reply.finish = choice.finish_reason;
  }
  if (chunk.usage) reply.usage = chunk.usage;
  if (chunk.sluice) reply.sluice = chunk.sluice;
  view.article.dataset.chunks = String(Number(view.article.dataset.chunks) + 1);
  view.article.scrollIntoView({ block: "end" });
}

// ---------------------------------------------------------------------------------------------
// Monitor: Prometheus text format (name{label="value",...} value [timestamp]).

function parseNumber(s) {
  if (s === "+Inf" || s === "Inf") return Infinity;
  if (s === "-Inf") return -Infinity;
  return Number(s);
}

function parseMetrics(text) {
  const samples = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"/g;
    let l;
    while ((l = re.exec(m[2] || "")) !== null) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    samples.push({ name: m[1], labels, value: parseNumber(m[3]), line: `${m[1]}${m[2] ? "{" + m[2] + "}" : ""}` });
  }
  return samples;
}

// Sum of every sample whose name matches `re` (and `not` does not); undefined when none does.
function total(samples, re, not) {
  let sum;
  for (const s of samples) {
    if (re.test(s.name) && !(not && not.test(s.name)) && Number.isFinite(s.value)) sum = (sum || 0) + s.value;
  }
  return sum;
}

const monitor = { prev: null, prevAt: 0, timer: null, seconds: 2 };

function fmt(x, digits) {
  return x === undefined || !Number.isFinite(x) ? "–" : x.toFixed(digits);
}

function pct(x) {
  return x === undefined || !Number.isFinite(x) ? "–" : `${(x * 100).toFixed(1)}%`;
}

function renderMetrics(samples, now) {
  const prev = monitor.prev;
  const dt = prev ? (now - monitor.prevAt) / 1000 : 0;
  const rate = (re, not) => {
    const a = total(samples, re, not);
    const b = prev ? total(prev, re, not) : undefined;
    return a !== undefined && b !== undefined && dt > 0 ? (a - b) / dt : undefined;
  };

  // Decode speed: tokens generated per second of wall time between two reads, and the server's
  // own figure (tokens over decode time) when it exports one.
  const generated = /(generated|completion|output)_tokens(_total)?$/;
  const served = rate(generated);
  const serverToks = total(samples, /tok(ens)?_per_s(econd)?|_tok_s$/);
  $("m-toks").textContent = `${fmt(served, 1)}${serverToks !== undefined ? ` (server ${fmt(serverToks, 1)})` : ""}`;

  const accGauge = total(samples, /acceptance(_ratio|_rate)?$/);
  const drafted = total(samples, /draft(ed)?_tokens(_total)?$|drafted(_total)?$/);
  const accepted = total(samples, /accepted(_tokens)?(_total)?$/);
  const acc = accGauge !== undefined ? accGauge : drafted ? accepted / drafted : undefined;
  $("m-accept").textContent = drafted === 0 ? "no drafts yet" : pct(acc);

  const queue = total(samples, /queue(_depth)?$/);
  const active = total(samples, /(active|running)(_requests)?$/);
  $("m-queue").textContent = `${fmt(queue, 0)} / ${fmt(active, 0)}`;

  // Time to first token: mean of a histogram or summary (_sum / _count), in seconds.
  const ttftSum = total(samples, /(time_to_first_token|ttft)\w*_sum$/);
  const ttftCount = total(samples, /(time_to_first_token|ttft)\w*_count$/);
  $("m-ttft").textContent = ttftCount ? `${fmt((ttftSum / ttftCount) * 1000, 0)} ms mean` : "–";

  const byStatus = {};
  for (const s of samples) {
    if (/requests(_total)?$/.test(s.name) && (s.labels.status || s.labels.code)) {
      const k = s.labels.status || s.labels.code;
      byStatus[k] = (byStatus[k] || 0) + s.value;
    }
  }
  const statuses = Object.keys(byStatus).sort();
  $("m-requests").textContent = statuses.length ? statuses.map((k) => `${k}: ${byStatus[k]}`).join(", ") : "–";

  // Hit rate: only when the server exports one (the expert cache exists on the GPU path).
  const hitGauge = total(samples, /hit_(rate|ratio)$/);
  const hits = total(samples, /_hits(_total)?$/);
  const misses = total(samples, /_miss(es)?(_total)?$/);
  const hit = hitGauge !== undefined ? hitGauge : hits !== undefined && misses !== undefined && hits + misses > 0 ? hits / (hits + misses) : undefined;
  $("card-hit").hidden = hit === undefined;
  if (hit !== undefined) $("m-hit").textContent = pct(hit);

  const rows = samples.map((s) => {
    const tr = document.createElement("tr");
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = s.line;
    const td = document.createElement("td");
    td.textContent = String(s.value);
    tr.append(th, td);
    return tr;
  });
  $("metrics-table").tBodies[0].replaceChildren(...rows);
}

async function pollMetrics() {
  monitor.timer = null;
  if ($("panel-monitor").hidden) return;
  try {
    const res = await fetch("/metrics", { headers: authHeaders() });
    if (!res.ok) throw new Error(await errorMessage(res));
    const samples = parseMetrics(await res.text());
    const now = performance.now();
    renderMetrics(samples, now);
    monitor.prev = samples;
    monitor.prevAt = now;
    $("metrics-state").textContent = `Updated ${new Date().toLocaleTimeString()}.`;
  } catch (e) {
    $("metrics-state").textContent = `Could not read /metrics: ${e.message}`;
  }
  if (!$("panel-monitor").hidden) monitor.timer = setTimeout(pollMetrics, monitor.seconds * 1000);
}

// ---------------------------------------------------------------------------------------------
// Tabs (the WAI-ARIA tabs pattern: arrow keys move between tabs, one tab stop).

function selectTab(tab) {
  for (const t of document.querySelectorAll('[role="tab"]')) {
    const on = t === tab;
    t.setAttribute("aria-selected", String(on));
    t.tabIndex = on ? 0 : -1;
    $(t.getAttribute("aria-controls")).hidden = !on;
  }
  tab.focus();
  if (tab.id === "tab-monitor" && monitor.timer === null) pollMetrics();
}

function initTabs() {
  const tabs = Array.from(document.querySelectorAll('[role="tab"]'));
  for (const t of tabs) {
    t.addEventListener("click", () => selectTab(t));
    t.addEventListener("keydown", (e) => {
      const i = tabs.indexOf(t);
      if (e.key === "ArrowRight") selectTab(tabs[(i + 1) % tabs.length]);
      else if (e.key === "ArrowLeft") selectTab(tabs[(i + tabs.length - 1) % tabs.length]);
      else return;
      e.preventDefault();
    });
  }
}

function init() {
  initTabs();
  $("poll-seconds").textContent = String(monitor.seconds);
  $("composer").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $("stop-gen").addEventListener("click", () => { if (state.controller) state.controller.abort(); });
  $("clear").addEventListener("click", () => {
    if (state.controller) state.controller.abort();
    state.messages = [];
    $("log").replaceChildren();
    $("prompt").focus();
  });
  $("settings").addEventListener("submit", (e) => e.preventDefault());
  loadServerInfo();
  pollReady();
}

document.addEventListener("DOMContentLoaded", init);
