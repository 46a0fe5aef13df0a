// eddy's dashboard: polls the admin endpoint's JSON API and renders it.
//
// The page shows the pipeline whose endpoint it was loaded from: it reads
// GET api/status (and GET savepoints) there, at / under `eddy run` and at
// /pipelines/NAME/ under `eddy serve`. At / of `eddy serve`, which has no
// api/status of its own, it lists GET api/pipelines instead, each linked
// to its own page. Everything the server reports is rendered as text
// (textContent, attributes), never as markup: record contents are user data.
"use strict";

(function () {
  const POLL_MS = 1500;
  // Savepoint files are opened and verified on every listing: they are
  // listed less often than the status, and after every savepoint action.
  const SAVEPOINT_POLL_MS = 10000;
  const SVG_NS = "http://www.w3.org/2000/svg";
  // Flink's backpressure levels, by the share of time blocked on output.
  const LEVEL_RANK = { ok: 0, low: 1, high: 2 };

  // base is the path of the endpoint the page was loaded from ("" at /).
  const base = location.pathname.replace(/\/(index\.html)?$/, "");
  // serveRoot is the path of `eddy serve`'s endpoint when the page is
  // that of one of its pipelines (/pipelines/NAME/), else null.
  const serveMatch = /^(.*)\/pipelines\/[^/]+$/.exec(base);
  const serveRoot = serveMatch ? serveMatch[1] : null;
  // listMode is set once the endpoint turned out to be `eddy serve`'s.
  let listMode = false;
  // token is the bearer token the user gave, asked for on the first 401.
  let token = "";
  let lastSavepoints = 0;
  let timer = 0;

  const $ = (sel) => document.querySelector(sel);

  // el makes an HTML element with attributes and children (strings become
  // text nodes).
  function el(tag, attrs, ...children) {
    return build(document.createElement(tag), attrs, children);
  }

  // svg makes an SVG element the same way.
  function svg(tag, attrs, ...children) {
    return build(document.createElementNS(SVG_NS, tag), attrs, children);
  }

  function build(node, attrs, children) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null && v !== false) node.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
    }
    return node;
  }

  // fill replaces the children of node.
  function fill(node, ...children) {
    node.replaceChildren(...children.filter((c) => c !== null && c !== undefined));
  }

  // ---- formatting ----

  function fmtRate(v) {
    if (!v) return "0";
    if (v < 10) return v.toFixed(2);
    if (v < 1000) return v.toFixed(1);
    if (v < 1e6) return (v / 1e3).toFixed(1) + "k";
    return (v / 1e6).toFixed(1) + "M";
  }

  function fmtCount(v) {
    return v === null || v === undefined ? "–" : Number(v).toLocaleString("en-US");
  }

  function fmtBytes(v) {
    if (v === null || v === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i++;
    }
    return (i === 0 ? String(v) : v.toFixed(1)) + " " + units[i];
  }

  function fmtMS(ms) {
    if (ms === null || ms === undefined) return "–";
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
    let s = Math.floor(ms / 1000);
    const d = Math.floor(s / 86400);
    const h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60);
    s %= 60;
    return (d ? d + "d " : "") + (d || h ? h + "h " : "") + m + "m " + s + "s";
  }

  function fmtPct(r) {
    return Math.round((r || 0) * 100) + "%";
  }

  function fmtTime(t) {
    if (t === null || t === undefined || t === "") return "–";
    const d = new Date(t);
    return isNaN(d) ? String(t) : d.toLocaleString();
  }

  // word makes a class name part out of a word the server sent.
  function word(s) {
    return String(s || "").toLowerCase().replace(/[^a-z0-9_-]/g, "");
  }

  // ---- the API ----

  async function getJSON(path) {
    const r = await fetch(path, { cache: "no-store", headers: { Accept: "application/json" } });
    let body = null;
    try {
      body = await r.json();
    } catch (e) {
      body = null;
    }
    return { status: r.status, ok: r.ok, body };
  }

  // post sends a state-changing request; on 401 it asks for the token (once,
  // until a request is refused with it) and sends it as a bearer token.
  async function post(path) {
    for (let attempt = 0; ; attempt++) {
      const headers = { Accept: "application/json" };
      if (token) headers.Authorization = "Bearer " + token;
      const r = await fetch(base + path, { method: "POST", headers });
      let body = null;
      try {
        body = await r.json();
      } catch (e) {
        body = null;
      }
      if (r.status !== 401) return { status: r.status, ok: r.ok, body };
      token = "";
      if (attempt > 0) return { status: r.status, ok: false, body };
      const given = window.prompt("This admin endpoint needs its token (EDDY_ADMIN_TOKEN):");
      if (!given) return { status: 401, ok: false, body: { error: "no token given" } };
      token = given.trim();
    }
  }

  // ---- rendering: header ----

  function renderHeader(s) {
    fill($("#name"), s.pipeline || "eddy");
    document.title = "eddy · " + (s.pipeline || "");
    const state = $("#state");
    state.className = "badge state-" + word(s.state);
    fill(state, s.state || "unknown");
    $("#summary").hidden = false;
    fill($("#uptime"), fmtMS(s.uptime_ms));
    fill($("#restarts"), String(s.restarts || 0));
    const g = $("#guarantee");
    fill(g, s.guarantee || "–");
    g.title = (s.guarantee_reasons || []).join("\n");
    const tx = s.transactions || {};
    fill($("#transactions"), fmtCount(tx.commits || 0) + " committed, " + fmtCount(tx.aborts || 0) + " aborted");
    const le = $("#last-error");
    le.hidden = !s.last_error;
    fill(le, s.last_error ? "last error: " + s.last_error : "");
    $("#actions").hidden = false;
  }

  // ---- rendering: the plan ----

  const NODE_W = 232;
  const NODE_H = 104;
  const COL_GAP = 96;
  const ROW_GAP = 44;
  const PAD = 28;

  // aggregate sums a node's subtasks: rates and counts add up, the ratios
  // are averages, the backpressure level and the watermark lag are the
  // worst subtask's.
  function aggregate(n) {
    const a = { inRate: 0, outRate: 0, busy: 0, bp: 0, idle: 0, late: 0, errors: 0, state: null, lag: null, level: "ok" };
    const subs = n.subtasks || [];
    for (const s of subs) {
      a.inRate += s.records_in_per_second || 0;
      a.outRate += s.records_out_per_second || 0;
      a.busy += s.busy_ratio || 0;
      a.bp += s.backpressured_ratio || 0;
      a.idle += s.idle_ratio || 0;
      a.late += s.late_dropped || 0;
      a.errors += s.record_errors || 0;
      if (s.state_bytes !== null && s.state_bytes !== undefined) a.state = (a.state || 0) + s.state_bytes;
      if (s.watermark_lag_ms !== null && s.watermark_lag_ms !== undefined) a.lag = Math.max(a.lag === null ? -Infinity : a.lag, s.watermark_lag_ms);
      if ((LEVEL_RANK[s.backpressure] || 0) > LEVEL_RANK[a.level]) a.level = s.backpressure;
    }
    if (subs.length) {
      a.busy /= subs.length;
      a.bp /= subs.length;
      a.idle /= subs.length;
    }
    return a;
  }

  // layout places each node in the column of its depth (the longest path
  // from a source), in the row of its chained input where that is free.
  function layout(nodes, edges) {
    const inputs = new Map(nodes.map((n) => [n.id, []]));
    for (const e of edges) if (inputs.has(e.to) && inputs.has(e.from)) inputs.get(e.to).push(e);
    const depth = new Map();
    const visit = (id, seen) => {
      if (depth.has(id)) return depth.get(id);
      if (seen.has(id)) return 0;
      seen.add(id);
      let d = 0;
      for (const e of inputs.get(id)) d = Math.max(d, visit(e.from, seen) + 1);
      depth.set(id, d);
      return d;
    };
    const used = new Map();
    const pos = new Map();
    for (const n of nodes) {
      const col = visit(n.id, new Set());
      if (!used.has(col)) used.set(col, new Set());
      const taken = used.get(col);
      const ins = inputs.get(n.id);
      const prefer = ins.find((e) => e.chained) || ins[0];
      let row = prefer && pos.has(prefer.from) ? pos.get(prefer.from).row : 0;
      if (taken.has(row)) row = 0;
      while (taken.has(row)) row++;
      taken.add(row);
      pos.set(n.id, { col, row, x: PAD + col * (NODE_W + COL_GAP), y: PAD + row * (NODE_H + ROW_GAP) });
    }
    return pos;
  }

  function renderGraph(s) {
    const g = $("#graph");
    const nodes = s.nodes || [];
    const edges = s.edges || [];
    const pos = layout(nodes, edges);
    let w = 0;
    let h = 0;
    for (const p of pos.values()) {
      w = Math.max(w, p.x + NODE_W + PAD);
      h = Math.max(h, p.y + NODE_H + PAD);
    }
    g.setAttribute("width", w);
    g.setAttribute("height", h);
    g.setAttribute("viewBox", "0 0 " + w + " " + h);
    const defs = svg("defs", {},
      svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerUnits: "userSpaceOnUse", markerWidth: 9, markerHeight: 9, orient: "auto" },
        svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" })));
    fill(g, defs, ...renderChains(s.tasks || [], pos), ...renderEdges(edges, pos), ...nodes.map((n) => renderNode(n, pos.get(n.id))));
  }

  // renderChains draws a box around the nodes of each chain of more than
  // one node, labelled with its task.
  function renderChains(tasks, pos) {
    const out = [];
    for (const t of tasks) {
      const ps = (t.nodes || []).map((id) => pos.get(id)).filter(Boolean);
      if (ps.length < 2) continue;
      const x = Math.min(...ps.map((p) => p.x)) - 10;
      const y = Math.min(...ps.map((p) => p.y)) - 22;
      const x2 = Math.max(...ps.map((p) => p.x)) + NODE_W + 10;
      const y2 = Math.max(...ps.map((p) => p.y)) + NODE_H + 10;
      out.push(svg("g", { class: "chain", "data-task": t.index },
        svg("rect", { x, y, width: x2 - x, height: y2 - y, rx: 10 }),
        svg("text", { x: x + 10, y: y + 15 }, "task " + t.index + " · chain ×" + t.parallelism)));
    }
    return out;
  }

  function edgeLabel(e) {
    if (e.chained) return "chained";
    let l = e.partition || "";
    if (e.key && e.key.length) l += " (" + e.key.join(", ") + ")";
    if (e.side) l += " [" + e.side + "]";
    if (e.dead_letters) l += " dead letters";
    return l;
  }

  function renderEdges(edges, pos) {
    const out = [];
    const seen = new Map();
    for (const e of edges) {
      const a = pos.get(e.from);
      const b = pos.get(e.to);
      if (!a || !b) continue;
      const pair = e.from + "\u0000" + e.to;
      const k = seen.get(pair) || 0;
      seen.set(pair, k + 1);
      const x1 = a.x + NODE_W;
      const y1 = a.y + NODE_H / 2 + k * 12;
      const x2 = b.x;
      const y2 = b.y + NODE_H / 2 + k * 12;
      const dx = Math.max(30, (x2 - x1) / 2);
      const label = edgeLabel(e);
      const short = label.length > 26 ? label.slice(0, 25) + "…" : label;
      const cls = "edge" + (e.chained ? " chained" : "") + (e.dead_letters || e.side ? " side" : "");
      out.push(svg("g", { class: cls, "data-from": e.from, "data-to": e.to },
        svg("title", {}, e.from + " → " + e.to + ": " + label),
        svg("path", { d: `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)" }),
        svg("text", { x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 5, "text-anchor": "middle" }, short)));
    }
    return out;
  }

  function renderNode(n, p) {
    const a = aggregate(n);
    const barW = NODE_W - 70;
    const bar = svg("g", { class: "ratios", transform: "translate(10,62)" },
      svg("rect", { class: "busy", x: 0, y: 0, width: barW * a.busy, height: 10 }),
      svg("rect", { class: "backpressured", x: barW * a.busy, y: 0, width: barW * a.bp, height: 10 }),
      svg("rect", { class: "idle", x: barW * (a.busy + a.bp), y: 0, width: barW * a.idle, height: 10 }),
      svg("rect", { class: "frame", x: 0, y: 0, width: barW, height: 10 }),
      svg("title", {}, "busy " + fmtPct(a.busy) + ", backpressured " + fmtPct(a.bp) + ", idle " + fmtPct(a.idle) + " (mean of the subtasks)"));
    const detail = [n.kind, n.type, "×" + n.parallelism].filter(Boolean).join(" · ");
    return svg("g", { class: "node kind-" + word(n.kind) + " level-" + word(a.level), "data-node": n.id, transform: `translate(${p.x},${p.y})` },
      svg("title", {}, n.id + (n.detail ? "\n" + n.detail : "")),
      svg("rect", { class: "box", width: NODE_W, height: NODE_H, rx: 6 }),
      svg("text", { class: "node-id", x: 10, y: 19 }, n.id),
      svg("text", { class: "node-type", x: 10, y: 36 }, detail),
      svg("text", { class: "rates", x: 10, y: 54 },
        "in ", svg("tspan", { class: "rate-in" }, fmtRate(a.inRate)), "/s · out ", svg("tspan", { class: "rate-out" }, fmtRate(a.outRate)), "/s"),
      bar,
      svg("text", { class: "level", x: NODE_W - 10, y: 71, "text-anchor": "end" }, a.level.toUpperCase()),
      svg("text", { class: "node-more", x: 10, y: 94 },
        "wm lag " + fmtMS(a.lag) + " · late " + fmtCount(a.late) + " · state " + fmtBytes(a.state)));
  }

  function renderSubtasks(s) {
    const rows = [];
    for (const n of s.nodes || []) {
      for (const t of n.subtasks || []) {
        const out = t.records_written !== undefined && t.records_written !== null ? t.records_written : t.records_out;
        rows.push(el("tr", { "data-node": n.id, "data-subtask": t.subtask },
          el("td", {}, n.id), el("td", { class: "num" }, String(t.subtask)),
          el("td", { class: "num rate-in" }, fmtRate(t.records_in_per_second)),
          el("td", { class: "num rate-out" }, fmtRate(t.records_out_per_second)),
          el("td", { class: "num" }, fmtCount(t.records_in)),
          el("td", { class: "num", title: n.kind === "sink" ? "written" : null }, fmtCount(out)),
          el("td", { class: "num busy-text" }, fmtPct(t.busy_ratio)),
          el("td", { class: "num backpressured-text" }, fmtPct(t.backpressured_ratio)),
          el("td", { class: "num idle-text" }, fmtPct(t.idle_ratio)),
          el("td", { title: t.phase ? "now " + t.phase : null }, el("span", { class: "badge level-" + word(t.backpressure) }, String(t.backpressure || "ok").toUpperCase())),
          el("td", {}, t.watermark === null || t.watermark === undefined ? "–" : fmtTime(t.watermark)),
          el("td", { class: "num" }, fmtMS(t.watermark_lag_ms)),
          el("td", { class: "num" }, fmtCount(t.late_dropped)),
          el("td", { class: "num" }, fmtCount(t.record_errors)),
          el("td", { class: "num" }, fmtBytes(t.state_bytes))));
      }
    }
    fill($("#subtasks tbody"), ...rows);
  }

  function renderKafka(s) {
    const rows = [];
    for (const n of s.nodes || []) {
      for (const t of n.subtasks || []) {
        for (const sp of t.splits || []) {
          rows.push(el("tr", {},
            el("td", {}, n.id), el("td", { class: "num" }, String(t.subtask)),
            el("td", {}, sp.name || String(sp.split)),
            el("td", { class: "num" }, sp.offset < 0 ? "–" : fmtCount(sp.offset)),
            el("td", { class: "num" }, fmtCount(sp.lag)),
            el("td", {}, sp.idle ? "idle" : "")));
        }
      }
    }
    $("#kafka").hidden = rows.length === 0;
    fill($("#kafka tbody"), ...rows);
  }

  // ---- rendering: checkpoints ----

  // alignment is a checkpoint's alignment time, where the server tells it.
  function alignment(c) {
    return c.alignment_ms === undefined || c.alignment_ms === null ? "–" : fmtMS(c.alignment_ms);
  }

  function renderCheckpoints(cs) {
    cs = cs || {};
    const all = (cs.in_progress || []).concat(cs.history || []);
    fill($("#checkpoints tbody"), ...all.map((c) =>
      el("tr", { class: "status-" + word(c.status) },
        el("td", { class: "num" }, String(c.id)),
        el("td", {}, c.kind + (c.final ? " (final)" : "")),
        el("td", {}, el("span", { class: "badge status-" + word(c.status) }, c.status)),
        el("td", {}, fmtTime(c.triggered)),
        el("td", { class: "num" }, fmtMS(c.duration_ms)),
        el("td", { class: "num" }, c.acknowledged + "/" + c.tasks),
        el("td", { class: "num" }, fmtBytes(c.state_bytes)),
        el("td", { class: "num" }, alignment(c)),
        el("td", { class: "error" }, c.error || ""))));
    fill($("#restored"), cs.restored ? "restored from " + cs.restored.id + " at " + fmtTime(cs.restored.at) : "");
    renderChart((cs.history || []).slice().reverse());
  }

  // renderChart draws the ended checkpoints, oldest first: a bar of the
  // duration each (left axis), and a line of the size (right axis).
  function renderChart(list) {
    const c = $("#checkpoint-chart");
    const W = 480, H = 140, L = 56, R = 64, T = 12, B = 22;
    const iw = W - L - R, ih = H - T - B;
    if (!list.length) {
      fill(c, svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "muted" }, "no checkpoint ended yet"));
      return;
    }
    const maxD = Math.max(1, ...list.map((x) => x.duration_ms || 0));
    const maxS = Math.max(1, ...list.map((x) => x.state_bytes || 0));
    const step = iw / list.length;
    const parts = [
      svg("line", { class: "axis", x1: L, y1: T + ih, x2: L + iw, y2: T + ih }),
      svg("text", { class: "axis-label duration", x: L - 4, y: T + 8, "text-anchor": "end" }, fmtMS(maxD)),
      svg("text", { class: "axis-label duration", x: L - 4, y: T + ih, "text-anchor": "end" }, "0"),
      svg("text", { class: "axis-label size", x: L + iw + 4, y: T + 8 }, fmtBytes(maxS)),
      svg("text", { class: "axis-label size", x: L + iw + 4, y: T + ih }, "0"),
      svg("text", { class: "axis-label", x: L, y: H - 4 }, "duration (bars)"),
      svg("text", { class: "axis-label size", x: L + iw, y: H - 4, "text-anchor": "end" }, "size (line)"),
    ];
    const pts = [];
    list.forEach((x, i) => {
      const bh = ((x.duration_ms || 0) / maxD) * ih;
      const cx = L + i * step + step / 2;
      parts.push(svg("rect", { class: "bar status-" + word(x.status), x: L + i * step + step * 0.2, y: T + ih - bh, width: step * 0.6, height: Math.max(bh, 1) },
        svg("title", {}, x.kind + " " + x.id + ": " + x.status + ", " + fmtMS(x.duration_ms) + ", " + fmtBytes(x.state_bytes))));
      pts.push(cx + "," + (T + ih - ((x.state_bytes || 0) / maxS) * ih));
    });
    parts.push(svg("polyline", { class: "size-line", points: pts.join(" ") }));
    for (const p of pts) {
      const [x, y] = p.split(",");
      parts.push(svg("circle", { class: "size-dot", cx: x, cy: y, r: 3 }));
    }
    fill(c, ...parts);
  }

  function renderSavepoints(body) {
    const list = (body && body.savepoints) || [];
    fill($("#savepoint-dir"), body && body.dir ? "in " + body.dir : "");
    // A file that does not open has no id or time.
    fill($("#savepoints tbody"), ...list.map((sp) =>
      el("tr", {},
        el("td", { class: "num" }, sp.status === "ok" ? String(sp.id) : "–"),
        el("td", {}, sp.status === "ok" ? fmtTime(sp.time) : "–"),
        el("td", {}, sp.final ? "final" : ""),
        el("td", { class: "num" }, fmtBytes(sp.size)),
        el("td", { title: sp.error || null }, sp.status),
        el("td", { class: "path" }, sp.path))));
  }

  // ---- rendering: samples ----

  function renderSamples(samples) {
    const out = [];
    const dead = [];
    for (const s of samples || []) {
      const recs = s.records || [];
      const block = el("div", { class: "sample", "data-sink": s.sink },
        el("h3", {}, s.sink),
        recs.length
          ? el("ol", {}, ...recs.map((r) => el("li", {}, el("code", {}, JSON.stringify(r)))))
          : el("p", { class: "muted" }, "no records yet"));
      (s.dead_letters ? dead : out).push(block);
    }
    fill($("#output-samples"), ...(out.length ? out : [el("p", { class: "muted" }, "no sink reports a sample")]));
    fill($("#dead-letters"), ...(dead.length ? dead : [el("p", { class: "muted" }, "no sink reads dead letters")]));
  }

  // ---- serve mode: the list of pipelines ----

  function renderPipelines(body) {
    const list = (body && body.pipelines) || [];
    fill($("#name"), "eddy serve");
    document.title = "eddy serve";
    $("#state").className = "badge";
    fill($("#state"), list.length + " pipelines");
    $("#summary").hidden = true;
    $("#actions").hidden = true;
    $("#last-error").hidden = true;
    $("#pipeline").hidden = true;
    $("#pipelines").hidden = false;
    fill($("#pipelines tbody"), ...list.map((p) =>
      el("tr", {},
        el("td", {}, el("a", { href: base + "/pipelines/" + encodeURIComponent(p.name) + "/" }, p.name)),
        el("td", {}, el("span", { class: "badge state-" + word(p.state) }, p.state || "")),
        el("td", { class: "error" }, [p.reason, p.error, ...(p.problems || []).map(problem)].filter(Boolean).join("\n")))));
  }

  // problem is a problem of an invalid pipeline file, as FILE:LINE:COL: MESSAGE.
  function problem(p) {
    return (p.file || "") + ":" + p.line + ":" + p.col + ": " + p.message;
  }

  // ---- the loop ----

  async function tick() {
    if (listMode) {
      const r = await getJSON(base + "/api/pipelines");
      if (!r.ok) throw new Error("GET api/pipelines: " + r.status + (r.body && r.body.error ? " " + r.body.error : ""));
      renderPipelines(r.body);
      return;
    }
    const r = await getJSON(base + "/api/status");
    if (r.status === 404 && serveRoot === null) {
      listMode = true;
      return tick();
    }
    if (!r.ok) throw new Error("GET api/status: " + r.status + (r.body && r.body.error ? " " + r.body.error : ""));
    $("#pipelines").hidden = true;
    $("#pipeline").hidden = false;
    const s = r.body;
    renderHeader(s);
    renderGraph(s);
    renderSubtasks(s);
    renderKafka(s);
    renderCheckpoints(s.checkpoints);
    renderSamples(s.samples);
    if (Date.now() - lastSavepoints >= SAVEPOINT_POLL_MS) await refreshSavepoints();
  }

  async function refreshSavepoints() {
    lastSavepoints = Date.now();
    const r = await getJSON(base + "/savepoints");
    if (r.ok) renderSavepoints(r.body);
  }

  async function loop() {
    clearTimeout(timer);
    const upd = $("#updated");
    try {
      await tick();
      upd.className = "muted";
      fill(upd, "updated " + new Date().toLocaleTimeString());
    } catch (e) {
      upd.className = "error";
      fill(upd, "update failed: " + e.message);
    }
    timer = setTimeout(loop, POLL_MS);
  }

  // ---- actions ----

  async function savepointAction(stop) {
    const result = $("#action-result");
    if (stop && !window.confirm("Stop " + ($("#name").textContent || "the pipeline") + " with a savepoint?")) return;
    const buttons = [$("#trigger-savepoint"), $("#stop-savepoint")];
    buttons.forEach((b) => (b.disabled = true));
    result.className = "muted";
    fill(result, stop ? "stopping with a savepoint…" : "taking a savepoint…");
    try {
      const r = await post("/savepoints" + (stop ? "?stop=true" : ""));
      if (r.ok && r.body) {
        result.className = "ok";
        fill(result, (r.body.final ? "final savepoint " : "savepoint ") + r.body.id + " written: " + r.body.path);
      } else {
        result.className = "error";
        fill(result, "savepoint failed (" + r.status + "): " + ((r.body && r.body.error) || "no answer"));
      }
    } catch (e) {
      result.className = "error";
      fill(result, "savepoint failed: " + e.message);
    } finally {
      buttons.forEach((b) => (b.disabled = false));
    }
    await refreshSavepoints().catch(() => {});
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("#trigger-savepoint").addEventListener("click", () => savepointAction(false));
    $("#stop-savepoint").addEventListener("click", () => savepointAction(true));
    if (serveRoot !== null) {
      const all = $("#all-pipelines");
      all.href = serveRoot + "/";
      all.hidden = false;
    }
    loop();
  });
})();
