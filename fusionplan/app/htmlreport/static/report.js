// fusionplan report: draws the data Python computed (fusionplan/app/htmlreport/payload.py).
// No library, nothing fetched: SVG and DOM only, so the page opens offline.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("fp-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const BOX_W = D.box ? D.box[0] : 150, BOX_H = D.box ? D.box[1] : 30, PAD = 8;
  const state = { plan: 0, group: null, view: null };
  const views = {};

  // -- small helpers -------------------------------------------------------------------
  function el(tag, attrs, parent, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function sv(tag, attrs, parent, text) {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function bytes(b) {
    if (b === null || b === undefined) return "–";
    const a = Math.abs(b);
    if (a >= 1048576) return (b / 1048576).toFixed(3) + " MB";
    if (a >= 1024) return (b / 1024).toFixed(1) + " KB";
    return b + " B";
  }
  function count(n) {
    if (n >= 1e9) return (n / 1e9).toFixed(2) + "G";
    if (n >= 1e6) return (n / 1e6).toFixed(2) + "M";
    if (n >= 1e3) return (n / 1e3).toFixed(1) + "k";
    return String(n);
  }
  function shape(s) { return s && s.length ? s.join("×") : "–"; }
  function kvTable(rows, parent) {
    const t = el("table", { class: "kv" }, parent);
    for (const [k, v, key] of rows) {
      const tr = el("tr", key ? { "data-key": key } : {}, t);
      el("td", { class: "muted" }, tr, k);
      el("td", {}, tr, v);
    }
    return t;
  }
  const tip = el("div", { class: "tip", hidden: "" }, document.body);
  function showTip(evt, lines) {
    tip.textContent = "";
    lines.forEach((ln, i) => el(i ? "div" : "b", {}, tip, ln));
    tip.hidden = false;
    const x = Math.min(evt.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    const y = Math.min(evt.clientY + 14, window.innerHeight - tip.offsetHeight - 8);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  function hideTip() { tip.hidden = true; }
  function plan() { return D.plans[state.plan]; }

  // -- tabs ----------------------------------------------------------------------------
  const nav = document.getElementById("tabs");
  const main = document.getElementById("views");
  function addView(id, title, build) {
    const button = el("button", { "data-view": id }, nav, title);
    const section = el("section", { class: "view " + id, id: "view-" + id, hidden: "" }, main);
    views[id] = { button, section, build, built: false };
    button.addEventListener("click", () => show(id));
  }
  function show(id) {
    for (const k in views) {
      const v = views[k];
      const on = k === id;
      v.button.classList.toggle("on", on);
      v.section.hidden = !on;
      if (on && !v.built) { v.built = true; v.build(v.section); }
    }
    state.view = id;
    if (id === "graph" && graph.fitPending) graph.fitWidth();
  }

  // -- graph view ----------------------------------------------------------------------
  const graph = { ops: [], regionLayer: null, fitPending: true };

  function buildGraph(section) {
    const bar = el("div", { class: "toolbar" }, section);
    if (D.plans.length > 1) {
      const select = el("select", { id: "plan-select", title: "plan shown" }, bar);
      D.plans.forEach((p, i) => el("option", { value: i }, select, p.label));
      select.value = state.plan;
      select.addEventListener("change", () => selectPlan(+select.value));
      graph.select = select;
    }
    const search = el("input", { type: "search", id: "search", placeholder: "find an op by name or type (Enter: next)" }, bar);
    const found = el("span", { class: "hint", id: "search-count" }, bar);
    for (const [label, fn] of [["Fit", () => fitAll()], ["Fit width", () => graph.fitWidth()],
                               ["+", () => zoomBy(1.25)], ["−", () => zoomBy(0.8)]]) {
      el("button", {}, bar, label).addEventListener("click", fn);
    }
    el("span", { class: "hint" }, bar, "drag to pan, wheel to zoom, click an op for its group");
    const split = el("div", { class: "split" }, section);
    const canvas = el("div", { class: "canvas", id: "canvas" }, split);
    const detail = el("aside", { id: "detail" }, split);
    el("p", { class: "muted" }, detail, "Click an op or a group region for its cost breakdown.");
    const svg = sv("svg", { id: "graph-svg" }, canvas);
    const defs = sv("defs", {}, svg);
    const marker = sv("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
      markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse" }, defs);
    sv("path", { d: "M0,0 L10,5 L0,10 z", fill: "#afb8c1" }, marker);
    const vp = sv("g", { id: "viewport" }, svg);
    graph.svg = svg; graph.vp = vp; graph.canvas = canvas; graph.detail = detail;
    graph.regionLayer = sv("g", { id: "regions" }, vp);
    const edgeLayer = sv("g", { id: "edges" }, vp);
    const opLayer = sv("g", { id: "ops" }, vp);
    for (const [, , pts] of D.graph.edges) {
      let d = "M" + pts[0] + "," + (pts[1] + BOX_H / 2);
      for (let i = 2; i < pts.length - 2; i += 2) d += " L" + pts[i] + "," + pts[i + 1];
      d += " L" + pts[pts.length - 2] + "," + (pts[pts.length - 1] - BOX_H / 2);
      sv("path", { class: "edge", d, "marker-end": "url(#arrow)" }, edgeLayer);
    }
    D.graph.ops.forEach((op, i) => {
      const g = sv("g", { class: "op", "data-i": i, "data-op": op.name,
        transform: "translate(" + (op.x - BOX_W / 2) + "," + (op.y - BOX_H / 2) + ")" }, opLayer);
      sv("rect", { class: "box", width: BOX_W, height: BOX_H, rx: 4 }, g);
      sv("rect", { class: "type", width: 5, height: BOX_H, rx: 2, fill: D.graph.colours[op.type] }, g);
      sv("text", { class: "t", x: 10, y: 13 }, g, op.type);
      sv("text", { class: "l", x: 10, y: 25 }, g, op.label);
      graph.ops.push(g);
    });
    opLayer.addEventListener("mouseover", (e) => {
      const g = e.target.closest(".op");
      if (g) showTip(e, opLines(+g.dataset.i));
    });
    opLayer.addEventListener("mousemove", (e) => {
      const g = e.target.closest(".op");
      if (g) showTip(e, opLines(+g.dataset.i));
    });
    opLayer.addEventListener("mouseout", hideTip);
    opLayer.addEventListener("click", (e) => {
      const g = e.target.closest(".op");
      if (g) selectGroup(groupOf(+g.dataset.i));
    });
    graph.regionLayer.addEventListener("click", (e) => {
      const r = e.target.closest(".region");
      if (r) selectGroup(+r.dataset.index);
    });
    panZoom(canvas);
    setupSearch(search, found);
    drawRegions();
    graph.fitWidth = fitWidth;
    if (state.group !== null) selectGroup(state.group);
  }

  function groupOf(i) { return plan().owner[i]; }

  function opLines(i) {
    const op = D.graph.ops[i];
    const gi = groupOf(i);
    const g = plan().groups[gi];
    const lines = [op.name, op.type + " (" + op.kind + ")", "output " + shape(op.out)];
    if (op.in.length) lines.push("inputs " + op.in.map(shape).join(", "));
    lines.push("weights " + count(op.weights) + " elements" + (op.macs ? ", MACs " + count(op.macs) : ""));
    lines.push("group " + g.id + (g.unfusable ? " (unfusable op, runs alone)" : " (" + g.ops.length + " ops)") +
               ", DRAM " + bytes(g.dram));
    return lines;
  }

  function drawRegions() {
    const layer = graph.regionLayer;
    layer.textContent = "";
    const p = plan();
    const inGroup = new Map();
    p.groups.forEach((g, gi) => g.ops.forEach((v) => inGroup.set(v, gi)));
    const links = p.groups.map(() => []);
    for (const [u, v, pts] of D.graph.edges) {
      if (inGroup.get(u) === inGroup.get(v)) links[inGroup.get(u)].push(pts);
    }
    p.groups.forEach((g, gi) => {
      const r = sv("g", { class: "region", "data-group": g.id, "data-index": gi, opacity: 0.22 }, layer);
      let d = "";
      for (const v of g.ops) {
        const op = D.graph.ops[v];
        const x = op.x - BOX_W / 2 - PAD, y = op.y - BOX_H / 2 - PAD;
        d += "M" + x + "," + y + "h" + (BOX_W + 2 * PAD) + "v" + (BOX_H + 2 * PAD) + "h" + -(BOX_W + 2 * PAD) + "z";
      }
      sv("path", { d, fill: g.colour }, r);
      if (links[gi].length) {
        let e = "";
        for (const pts of links[gi]) {
          e += "M" + pts[0] + "," + pts[1];
          for (let i = 2; i < pts.length; i += 2) e += " L" + pts[i] + "," + pts[i + 1];
        }
        sv("path", { d: e, fill: "none", stroke: g.colour, "stroke-width": PAD + 4, "stroke-linejoin": "round" }, r);
      }
    });
    graph.ops.forEach((node, i) => {
      const g = p.groups[groupOf(i)];
      node.classList.toggle("unfusable", g.unfusable);
      node.querySelector("rect.box").style.stroke = g.unfusable ? "" : g.colour;
    });
  }

  function selectPlan(i) {
    state.plan = i;
    state.group = null;
    if (graph.select) graph.select.value = i;
    if (views.graph && views.graph.built) {
      drawRegions();
      graph.ops.forEach((n) => n.classList.remove("sel"));
      graph.detail.textContent = "";
      el("p", { class: "muted" }, graph.detail, "Click an op or a group region for its cost breakdown.");
    }
    if (views.numbers && views.numbers.built) buildNumbers(views.numbers.section);
  }

  function selectGroup(gi) {
    state.group = gi;
    if (!views.graph.built) return;
    const g = plan().groups[gi];
    graph.regionLayer.querySelectorAll(".region").forEach((r) => r.classList.toggle("sel", +r.dataset.index === gi));
    const members = new Set(g.ops);
    graph.ops.forEach((n, i) => n.classList.toggle("sel", members.has(i)));
    renderDetail(g);
  }

  function renderDetail(g) {
    const p = plan();
    const box = graph.detail;
    box.textContent = "";
    box.setAttribute("data-group", g.id);
    const h = el("h3", {}, box, "Group " + g.id + " · " + g.ops.length + (g.ops.length === 1 ? " op" : " ops"));
    if (g.unfusable) el("span", { class: "tag" }, h, "unfusable");
    const cap = p.accelerator.buffer_bytes;
    kvTable([
      ["DRAM", bytes(g.dram), "dram"],
      ["buffer need", bytes(g.buffer) + " of " + bytes(cap) + " (" + (100 * g.buffer / cap).toFixed(1) + "%)", "buffer"],
    ], box);
    box.querySelector("[data-key=dram]").setAttribute("data-bytes", g.dram);
    box.querySelector("[data-key=buffer]").setAttribute("data-bytes", g.buffer);
    const meter = el("div", { class: "meter", title: "buffer need / buffer" }, box);
    el("span", { style: "width:" + Math.min(100, 100 * g.buffer / cap) + "%;background:" + (g.buffer > cap ? "#cf222e" : g.colour) }, meter);
    if (g.tensors.length) {
      el("div", { class: "muted" }, box, "DRAM per tensor (read: from outside the group, write: out of it)");
      const t = el("table", { class: "list", id: "traffic" }, box);
      const hr = el("tr", {}, t);
      el("th", {}, hr, "tensor"); el("th", {}, hr, ""); el("th", { class: "num" }, hr, "bytes");
      for (const row of g.tensors) {
        const tr = el("tr", { class: "traffic", "data-tensor": row.tensor, "data-dir": row.dir, "data-bytes": row.bytes }, t);
        el("td", { class: "name" }, tr, row.tensor);
        el("td", {}, tr, row.dir);
        el("td", { class: "num" }, tr, bytes(row.bytes));
      }
    }
    if (g.weights.length) {
      el("div", { class: "muted" }, box, "weights (" + (g.weights_mode || "?") + ")");
      const t = el("table", { class: "list", id: "weights" }, box);
      for (const row of g.weights) {
        const tr = el("tr", { class: "weight", "data-op": row.op, "data-bytes": row.bytes }, t);
        el("td", { class: "name" }, tr, row.op);
        el("td", { class: "num" }, tr, bytes(row.bytes));
      }
    }
    el("div", { class: "muted" }, box, "schedule");
    if (g.schedule) {
      const rows = [];
      for (const k in g.schedule) {
        const v = g.schedule[k];
        rows.push([k, Array.isArray(v) ? v.join(", ") : (k.endsWith("bytes") ? bytes(v) : String(v))]);
      }
      kvTable(rows, box).id = "schedule";
    } else {
      el("p", { class: "muted" }, box, "the plan file holds no schedule for this group");
    }
    el("div", { class: "muted" }, box, "ops");
    const list = el("table", { class: "list" }, box);
    for (const v of g.ops) {
      const op = D.graph.ops[v];
      const tr = el("tr", { class: "member", style: "cursor:pointer" }, list);
      el("td", {}, tr, op.type);
      el("td", { class: "name" }, tr, op.name);
      tr.addEventListener("click", () => centerOn(v));
    }
  }

  // zoom and pan: a transform on the viewport group
  const view = { k: 1, x: 0, y: 0 };
  function applyView() {
    graph.vp.setAttribute("transform", "translate(" + view.x + "," + view.y + ") scale(" + view.k + ")");
  }
  function zoomAt(factor, cx, cy) {
    const k = Math.max(0.02, Math.min(4, view.k * factor));
    view.x = cx - (cx - view.x) * (k / view.k);
    view.y = cy - (cy - view.y) * (k / view.k);
    view.k = k;
    applyView();
  }
  function zoomBy(f) { const r = graph.canvas.getBoundingClientRect(); zoomAt(f, r.width / 2, r.height / 2); }
  function fitAll() {
    const r = graph.canvas.getBoundingClientRect();
    view.k = Math.min(r.width / D.graph.width, r.height / D.graph.height, 1);
    view.x = (r.width - D.graph.width * view.k) / 2;
    view.y = 0;
    applyView();
  }
  function fitWidth() {
    const r = graph.canvas.getBoundingClientRect();
    if (!r.width) return;
    graph.fitPending = false;
    view.k = Math.min(r.width / D.graph.width, 1);
    view.x = (r.width - D.graph.width * view.k) / 2;
    view.y = 0;
    applyView();
  }
  function centerOn(i) {
    const op = D.graph.ops[i];
    const r = graph.canvas.getBoundingClientRect();
    view.k = Math.max(view.k, 0.8);
    view.x = r.width / 2 - op.x * view.k;
    view.y = r.height / 2 - op.y * view.k;
    applyView();
  }
  function panZoom(canvas) {
    let drag = null;
    canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = canvas.getBoundingClientRect();
      zoomAt(Math.exp(-e.deltaY * 0.0015), e.clientX - r.left, e.clientY - r.top);
    }, { passive: false });
    canvas.addEventListener("mousedown", (e) => {
      drag = { x: e.clientX, y: e.clientY, vx: view.x, vy: view.y };
      canvas.classList.add("dragging");
    });
    window.addEventListener("mousemove", (e) => {
      if (!drag) return;
      view.x = drag.vx + e.clientX - drag.x;
      view.y = drag.vy + e.clientY - drag.y;
      applyView();
    });
    window.addEventListener("mouseup", () => { drag = null; canvas.classList.remove("dragging"); });
  }
  function setupSearch(input, found) {
    let hits = [], at = -1;
    input.addEventListener("input", () => {
      const q = input.value.trim().toLowerCase();
      hits = [];
      at = -1;
      D.graph.ops.forEach((op, i) => {
        const m = q !== "" && (op.name.toLowerCase().includes(q) || op.type.toLowerCase() === q);
        graph.ops[i].classList.toggle("match", m);
        graph.ops[i].classList.remove("hit");
        if (m) hits.push(i);
      });
      found.textContent = q ? hits.length + (hits.length === 1 ? " op" : " ops") : "";
    });
    input.addEventListener("keydown", (e) => {
      if (e.key !== "Enter" || !hits.length) return;
      if (at >= 0) graph.ops[hits[at]].classList.remove("hit");
      at = (at + 1) % hits.length;
      graph.ops[hits[at]].classList.add("hit");
      centerOn(hits[at]);
      found.textContent = (at + 1) + " of " + hits.length;
    });
  }

  // -- numbers view --------------------------------------------------------------------
  function buildNumbers(section) {
    section.textContent = "";
    const p = plan();
    const m = p.metrics;
    const head = el("div", { class: "toolbar" }, section);
    el("b", {}, head, p.label);
    el("span", { class: "hint" }, head, p.buffer);
    const cards = el("div", { class: "cards", id: "totals" }, section);
    const card = (title, value, sub, key) => {
      const c = el("div", { class: "card", "data-key": key }, cards);
      el("div", { class: "muted" }, c, title);
      el("div", { class: "v" }, c, value);
      if (sub) el("div", { class: "muted" }, c, sub);
    };
    card("DRAM traffic", bytes(m.dram_bytes), "fusable " + bytes(m.fusable_dram_bytes) + ", unfusable " + bytes(m.unfusable_dram_bytes), "dram");
    card("lower bound", bytes(m.lower_bound_bytes), m.bound_method, "bound");
    card("gap", (100 * m.gap).toFixed(2) + " %", m.gap === 0 ? "proven optimal" : "DRAM above the bound", "gap");
    card("compulsory", bytes(m.compulsory_bytes), "graph I/O + weights once", "compulsory");
    card("largest buffer need", bytes(m.mbu_bytes), "of " + bytes(p.accelerator.buffer_bytes), "mbu");
    card("groups", String(m.groups), m.fused_groups + " fused, " + m.unfusable_ops + " unfusable ops", "groups");
    if (p.prepasses.length) {
      el("h3", {}, section, "Pre-passes: what ran on the model before it was planned");
      const list = el("ul", { id: "prepasses" }, section);
      for (const r of p.prepasses) {
        const item = el("li", {}, list, r.pass + ": " + r.summary);
        for (const note of r.notes) el("div", { class: "muted" }, item, note);
        r.streams.forEach((ops, s) => el("div", { class: "muted" }, item, "stream " + s + ": " + ops.join(", ")));
      }
    }
    el("h3", {}, section, "Where the traffic goes: groups by DRAM");
    const bars = el("div", { class: "bars", id: "bars" }, section);
    const hr = el("div", { class: "bar-row head" }, bars);
    ["group", "DRAM", "", "buffer need / buffer", ""].forEach((t) => el("div", {}, hr, t));
    const maxDram = Math.max(1, ...p.groups.map((g) => g.dram));
    const cap = p.accelerator.buffer_bytes;
    const order = p.groups.map((g, i) => i).sort((a, b) => p.groups[b].dram - p.groups[a].dram || a - b);
    for (const gi of order) {
      const g = p.groups[gi];
      const row = el("div", { class: "bar-row", "data-group": g.id, "data-dram": g.dram }, bars);
      const first = D.graph.ops[g.ops[0]];
      el("div", { title: first.name }, row, "G" + g.id + " · " + (g.unfusable ? first.type + " (unfusable)" : g.ops.length === 1 ? first.type : g.ops.length + " ops from " + first.type));
      const t1 = el("div", { class: "track" }, row);
      el("span", { style: "width:" + (100 * g.dram / maxDram) + "%;background:" + g.colour }, t1);
      el("div", { class: "num" }, row, bytes(g.dram));
      const t2 = el("div", { class: "track" }, row);
      el("span", { style: "width:" + Math.min(100, 100 * g.buffer / cap) + "%;background:" + g.colour + ";opacity:.6" }, t2);
      el("div", { class: "num" }, row, bytes(g.buffer));
      row.addEventListener("click", () => { show("graph"); selectGroup(gi); centerOn(g.ops[0]); });
    }
  }

  // -- diff view -----------------------------------------------------------------------
  function buildDiff(section) {
    const bar = el("div", { class: "toolbar" }, section);
    el("span", {}, bar, "baseline: " + D.plans[0].label + "  vs");
    const select = el("select", { id: "diff-select" }, bar);
    D.diffs.forEach((d, i) => el("option", { value: i }, select, D.plans[d.b].label));
    const body = el("div", {}, section);
    const draw = () => drawDiff(body, D.diffs[+select.value]);
    select.addEventListener("change", draw);
    draw();
  }

  function drawDiff(body, diff) {
    body.textContent = "";
    const a = D.plans[diff.a], b = D.plans[diff.b];
    const t = el("table", { class: "list", id: "diff-totals", style: "max-width:760px" }, body);
    const hr = el("tr", {}, t);
    ["", a.label, b.label].forEach((s) => el("th", { class: "num" }, hr, s));
    const rows = [
      ["buffer", a.buffer, b.buffer],
      ["DRAM", bytes(a.metrics.dram_bytes), bytes(b.metrics.dram_bytes)],
      ["lower bound", bytes(a.metrics.lower_bound_bytes), bytes(b.metrics.lower_bound_bytes)],
      ["groups (fused)", a.metrics.groups + " (" + a.metrics.fused_groups + ")", b.metrics.groups + " (" + b.metrics.fused_groups + ")"],
      ["largest buffer need", bytes(a.metrics.mbu_bytes), bytes(b.metrics.mbu_bytes)],
    ];
    for (const r of rows) {
      const tr = el("tr", {}, t);
      r.forEach((s, i) => el("td", { class: i ? "num" : "muted" }, tr, s));
    }
    const total = diff.regions.reduce((s, r) => s + r.saved, 0);
    el("h3", {}, body, diff.regions.length + " changed region" + (diff.regions.length === 1 ? "" : "s") +
       ": " + bytes(total) + " of DRAM saved by " + b.label);
    el("p", { class: "muted" }, body, "A region is the smallest set of ops both plans group among themselves; " +
       "its groups on each side and their DRAM. Click a region to see it in the graph (" + b.label + ").");
    const table = el("table", { class: "list", id: "diff-regions" }, body);
    const h = el("tr", {}, table);
    ["ops", "first op", a.label + ": groups", "DRAM", b.label + ": groups", "DRAM", "saved"].forEach((s, i) =>
      el("th", { class: i === 3 || i >= 5 ? "num" : "" }, h, s));
    for (const r of diff.regions) {
      const tr = el("tr", { class: "region-row", "data-saved": r.saved }, table);
      el("td", { class: "num" }, tr, String(r.ops.length));
      el("td", { class: "name" }, tr, D.graph.ops[r.ops[0]].name);
      el("td", {}, tr, r.a.map((i) => "G" + a.groups[i].id).join(" "));
      el("td", { class: "num" }, tr, bytes(r.a_dram));
      el("td", {}, tr, r.b.map((i) => "G" + b.groups[i].id).join(" "));
      el("td", { class: "num" }, tr, bytes(r.b_dram));
      el("td", { class: "num " + (r.saved >= 0 ? "saved-pos" : "saved-neg") }, tr, bytes(r.saved));
      tr.addEventListener("click", () => {
        selectPlan(diff.b);
        show("graph");
        const set = new Set(r.ops);
        graph.ops.forEach((n, i) => n.classList.toggle("hit", set.has(i)));
        selectGroup(r.b[0]);
        centerOn(r.ops[0]);
      });
    }
  }

  // -- sweep view ----------------------------------------------------------------------
  function buildSweep(section) {
    const rows = D.sweep.rows.filter((r) => !r.error);
    const failed = D.sweep.rows.length - rows.length;
    const series = new Map();
    for (const r of rows) {
      const key = (r.model ? r.model + " " : "") + String(r.scheme).toUpperCase();
      if (!series.has(key)) series.set(key, []);
      series.get(key).push(r);
    }
    const head = el("div", { class: "toolbar" }, section);
    el("b", {}, head, "DRAM traffic and its proven lower bound against the buffer");
    const hint = rows.some((r) => r.plan >= 0) ? "click a point to open its plan"
      : "hover a point for its figures (a report given the plan files opens them)";
    const status = el("span", { id: "status" }, head, hint);
    if (failed) el("span", { class: "tag" }, head, failed + " failed row(s) not drawn");
    const W = 860, H = 440, L = 70, R = 180, T = 16, B = 44;
    const svg = sv("svg", { class: "chart", id: "sweep-chart", width: W, height: H, viewBox: "0 0 " + W + " " + H }, section);
    const xs = [...new Set(rows.map((r) => r.buffer_bytes))].sort((p, q) => p - q);
    const lx = (b) => Math.log2(b);
    const x0 = lx(xs[0]), x1 = lx(xs[xs.length - 1]);
    const X = (b) => L + (x1 === x0 ? (W - L - R) / 2 : (lx(b) - x0) / (x1 - x0) * (W - L - R));
    const ymax = Math.max(...rows.map((r) => Math.max(r.dram_mb, r.lower_bound_mb))) * 1.08 || 1;
    const Y = (v) => H - B - v / ymax * (H - T - B);
    const step = niceStep(ymax / 6);
    for (let v = 0; v <= ymax; v += step) {
      sv("line", { class: "grid", x1: L, x2: W - R, y1: Y(v), y2: Y(v) }, svg);
      sv("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end" }, svg, +v.toFixed(3) + "");
    }
    for (const b of xs) {
      const r = rows.find((q) => q.buffer_bytes === b);
      sv("text", { x: X(b), y: H - B + 16, "text-anchor": "middle" }, svg, r.buffer || bytes(b));
    }
    sv("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }, svg);
    sv("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }, svg);
    sv("text", { x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle" }, svg, "on-chip buffer (log scale)");
    sv("text", { x: 14, y: (T + H - B) / 2, transform: "rotate(-90 14 " + (T + H - B) / 2 + ")", "text-anchor": "middle" }, svg, "DRAM (MB)");
    let si = 0;
    for (const [key, pts] of series) {
      const colour = D.palette[si % D.palette.length];
      pts.sort((p, q) => p.buffer_bytes - q.buffer_bytes);
      const line = (f) => pts.map((r, i) => (i ? "L" : "M") + X(r.buffer_bytes) + "," + Y(f(r))).join(" ");
      sv("path", { d: line((r) => r.lower_bound_mb), fill: "none", stroke: colour, "stroke-dasharray": "4 3", opacity: 0.7 }, svg);
      sv("path", { d: line((r) => r.dram_mb), fill: "none", stroke: colour, "stroke-width": 2 }, svg);
      for (const r of pts) {
        const c = sv("circle", { class: "pt" + (r.plan < 0 ? " noplan" : ""), cx: X(r.buffer_bytes), cy: Y(r.dram_mb), r: 5,
          fill: colour, "data-plan": r.plan, "data-buffer": r.buffer_bytes, "data-series": key }, svg);
        const lines = [key + " at " + (r.buffer || bytes(r.buffer_bytes)), "DRAM " + r.dram_mb.toFixed(3) + " MB",
          "lower bound " + r.lower_bound_mb.toFixed(3) + " MB" + (r.bound_method ? " (" + r.bound_method + ")" : "")];
        if (r.gap !== undefined) lines.push("gap " + (100 * r.gap).toFixed(2) + " %");
        if (r.groups !== undefined) lines.push(r.groups + " groups");
        lines.push(r.plan >= 0 ? "click: open this plan" : "no plan of this point in the report");
        c.addEventListener("mousemove", (e) => showTip(e, lines));
        c.addEventListener("mouseout", hideTip);
        c.addEventListener("click", () => {
          if (r.plan < 0) { status.textContent = "the report holds no plan for " + lines[0] + " (give its plan file too)"; return; }
          selectPlan(r.plan);
          show("graph");
        });
      }
      const ly = T + 14 + si * 34;
      sv("line", { x1: W - R + 14, x2: W - R + 36, y1: ly, y2: ly, stroke: colour, "stroke-width": 2 }, svg);
      sv("text", { x: W - R + 42, y: ly + 4 }, svg, key + " DRAM");
      sv("line", { x1: W - R + 14, x2: W - R + 36, y1: ly + 14, y2: ly + 14, stroke: colour, "stroke-dasharray": "4 3" }, svg);
      sv("text", { x: W - R + 42, y: ly + 18 }, svg, "lower bound");
      si += 1;
    }
  }
  function niceStep(raw) {
    const p = Math.pow(10, Math.floor(Math.log10(raw || 1)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  // -- stream schedules ----------------------------------------------------------------
  function buildStreams(section) {
    const S = D.streams;
    const bar = el("div", { class: "toolbar" }, section);
    el("b", {}, bar, S.title);
    const scale = { f: 1 };
    const charts = el("div", {}, section);
    for (const [label, f] of [["+", 2], ["−", 0.5]]) {
      el("button", {}, bar, label).addEventListener("click", () => { scale.f *= f; draw(); });
    }
    el("span", { class: "hint" }, bar, "one colour per op type in every chart; grey arrows: cross-stream events");
    const legend = el("div", { class: "legend", id: "op-types" }, section);
    for (const t in S.colours) {
      const s = el("span", {}, legend);
      el("span", { class: "swatch", style: "background:" + S.colours[t] }, s);
      s.appendChild(document.createTextNode(t));
    }
    function draw() {
      charts.textContent = "";
      S.charts.forEach((c, ci) => drawGantt(charts, c, ci, scale.f));
    }
    draw();
  }

  function drawGantt(parent, c, ci, f) {
    const S = D.streams;
    el("h3", {}, parent, c.label + ": " + c.streams + " streams, " + c.ops.length + " ops, " + c.events.length + " events");
    const wrap = el("div", { class: "gantt-wrap" }, parent);
    const span = Math.max(1e-9, ...c.ops.map((o) => o.end));
    const L = 70, LANE = 26, T = 8;
    const perStream = new Array(c.streams).fill(0);
    c.ops.forEach((o) => { perStream[o.stream] += 1; });
    // wide enough for a label in an average bar (the chart scrolls sideways), at least the page
    const inner = Math.max(600, (parent.clientWidth || 1100) - L - 30, 44 * Math.max(...perStream)) * f;
    const W = L + inner + 20, H = T + c.streams * LANE + 28;
    const X = (t) => L + t / span * inner;
    const svg = sv("svg", { class: "gantt", id: "gantt-" + ci, width: W, height: H }, wrap);
    const defs = sv("defs", {}, svg);
    const mk = sv("marker", { id: "ev" + ci, viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 5, markerHeight: 5, orient: "auto" }, defs);
    sv("path", { d: "M0,0 L10,5 L0,10 z", fill: "#6e7781" }, mk);
    for (let s = 0; s < c.streams; s++) {
      sv("text", { class: "lane", x: 6, y: T + s * LANE + LANE / 2 + 4 }, svg, "stream " + s);
      sv("line", { x1: L, x2: W - 10, y1: T + (s + 1) * LANE, y2: T + (s + 1) * LANE, stroke: "#eaeef2" }, svg);
    }
    const step = niceStep(span / 8);
    for (let t = 0; t <= span + 1e-9; t += step) {
      sv("line", { x1: X(t), x2: X(t), y1: T, y2: T + c.streams * LANE, stroke: "#f0f2f4" }, svg);
      sv("text", { class: "lane", x: X(t), y: H - 8, "text-anchor": "middle" }, svg, +t.toFixed(2) + " µs");
    }
    for (const o of c.ops) {
      const x = X(o.start), w = Math.max(0.8, X(o.end) - x), y = T + o.stream * LANE + 3;
      const r = sv("rect", { class: "op", x, y, width: w, height: LANE - 6, fill: S.colours[o.type], "data-op": o.name, "data-type": o.type }, svg);
      if (w > 34) sv("text", { x: x + 3, y: y + LANE / 2 + 1 }, svg, o.type.slice(0, Math.floor(w / 6)));
      const lines = [o.name, o.type + " on stream " + o.stream, o.start.toFixed(3) + " – " + o.end.toFixed(3) + " µs (" + (o.end - o.start).toFixed(3) + " µs)"];
      r.addEventListener("mousemove", (e) => showTip(e, lines));
      r.addEventListener("mouseout", hideTip);
    }
    for (const [su, tu, sw, tw] of c.events) {
      sv("line", { class: "event", x1: X(tu), y1: T + su * LANE + LANE / 2, x2: X(tw), y2: T + sw * LANE + LANE / 2,
        "marker-end": "url(#ev" + ci + ")" }, svg);
    }
  }

  // -- start ---------------------------------------------------------------------------
  for (const p of D.plans) {
    p.owner = new Array(D.graph ? D.graph.ops.length : 0);
    p.groups.forEach((g, gi) => g.ops.forEach((v) => { p.owner[v] = gi; }));
  }
  if (D.plans.length) {
    addView("graph", "Graph", buildGraph);
    addView("numbers", "Numbers", buildNumbers);
  }
  if (D.plans.length > 1) addView("diff", "Diff", buildDiff);
  if (D.sweep) addView("sweep", "Sweep", buildSweep);
  if (D.streams) addView("streams", "Streams", buildStreams);
  const first = Object.keys(views)[0];
  if (first) show(D.start && views[D.start] ? D.start : first);
  document.body.setAttribute("data-ready", String(Math.round(performance.now())));
})();
