// terra-nb GraphView: a Graphviz SVG of the TraceGraph with pan/zoom, path and new-node marks,
// node details on hover/click, and expand/collapse of chains and loops. Hand-written ES module,
// no build step, no network.

/**
 * @typedef {Object} GraphTraits
 * @property {string} svg             the laid-out SVG (Graphviz, or the built-in layout)
 * @property {string} graph_json      TraceGraph JSON (its `region_calls`: function op type ->
 *                                    name, kind, label, source, ops; `branches`: the user's
 *                                    statements at branch points, `u<k>` draws the k-th;
 *                                    `variables`: variable key -> name; `variant_labels`) plus
 *                                    `elements` (SVG id -> node ids), `groups` (collapsible
 *                                    chains, loops, regions), `source_lines`
 * @property {number[]} current       node ids on the current iteration's path
 * @property {number[]} new_nodes     node ids added since the previous layout
 * @property {string[]} toggled       group keys whose collapsed state the user flipped
 * @property {string} selected        the SVG id of the clicked element
 * @property {string} layout_message  why the built-in layout is used, or ""
 */

function h(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function esc(value) {
  return String(value).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

function specText(spec) {
  const [dtype, shape] = spec;
  return `${dtype}[${shape === null ? "?" : shape.map((d) => (d === null ? "?" : d)).join(",")}]`;
}

function sourceText(data, s) {
  const [kind, index, output, detail] = s;
  if (kind === "node") return `#${index}` + (output ? `.${output}` : "");
  if (kind === "carry") return `prev #${index}` + (output ? `.${output}` : "");
  if (kind === "var") return `var ${data.variables[detail] || detail}`;
  return `${kind}${detail ? " " + detail : ""}`;
}

function where(data, location) {
  // `<terra-cell-ab12>:6` -> `In [3]:6`, as the front end names its cells
  const i = (location || "").lastIndexOf(":");
  const cell = i > 0 ? data.cells[location.slice(0, i)] : undefined;
  return cell ? cell + location.slice(i) : location;
}

function parseData(text) {
  const data = JSON.parse(text || "{}");
  data.cells = data.cells || {};
  data.nodes = data.nodes || [];
  data.elements = data.elements || {};
  data.groups = data.groups || {};
  data.source_lines = data.source_lines || {};
  data.region_calls = data.region_calls || {};
  data.branches = data.branches || [];
  data.variables = data.variables || {};
  data.variant_labels = data.variant_labels || {};
  data.keyOf = new Map();
  for (const [key, members] of Object.entries(data.elements)) {
    for (const id of members) data.keyOf.set(id, key);
  }
  return data;
}

function rows(items) {
  return `<table>${items.map((cells) => `<tr>${cells.map((c) => `<td>${c}</td>`).join("")}</tr>`).join("")}</table>`;
}

function nodeDetails(data, n) {
  if (n.kind !== "op") return `<h4>${esc(n.kind)} #${n.id}</h4>`;
  const badges = (n.feeds.length ? '<span class="terra-badge terra-feed">feed</span>' : "") +
    (n.fetches.length ? '<span class="terra-badge terra-fetch">fetch</span>' : "") +
    ((data.branch_points || []).includes(n.id) ? '<span class="terra-badge" title="paths part after this op: see the case or variant edges">paths part</span>' : "");
  const line = data.source_lines[n.location];
  const inputs = n.input_specs.map((s, i) => [
    `in ${i}`, esc(specText(s)), esc((n.sources[i] || []).map((s) => sourceText(data, s)).join(" | ")),
  ]);
  const outputs = n.outputs.map((s, i) => [`out ${i}`, esc(specText(s)), n.fetches.includes(i) ? "fetched" : ""]);
  const attrs = n.attrs.map(([k, v]) => [esc(k), `<code>${esc(JSON.stringify(v))}</code>`]);
  return `<h4>${esc(n.op_type)}${badges}</h4>` +
    `<div class="terra-muted">node #${n.id} · <code>${esc(where(data, n.location))}</code></div>` +
    `<div class="terra-muted" title="hits: how often tracing recorded this op, in all traced iterations together; co-executed iterations are not counted">traced ${n.hits}× in total${n.parent >= 0 ? " (once per trip of its loop)" : " (once per traced iteration)"}</div>` +
    (line ? `<div class="terra-source">${esc(line.trim())}</div>` : "") +
    rows([...inputs, ...outputs]) + (attrs.length ? "<b>attributes</b>" + rows(attrs) : "");
}

const REGION_KINDS = { forward: "forward function", backward: "backward function, on the tape", guard: "branch guard" };

function regionDetails(data, n) {
  const call = data.region_calls[n.op_type];
  const line = data.source_lines[n.location];
  return `<h4>${esc(data.variant_labels[n.id] || call.label)}</h4>` +
    `<div class="terra-muted">${esc(call.name)} · ${esc(REGION_KINDS[call.kind] || call.kind)} · node #${n.id} · ` +
    `<code>${esc(where(data, n.location))}</code></div>` +
    (line ? `<div class="terra-source">${esc(line.trim())}</div>` : "") +
    `<div class="terra-muted" title="the compiled function, called as one op">one op: <code>${esc(n.op_type)}</code> · traced ${n.hits}×</div>` +
    `<b>${call.ops.length} op types it runs</b>` + rows(call.ops.map((op, k) => [String(k), esc(op)]));
}

function regionKey(key) {
  // `r5` (collapsed), `cluster_r5` (open), `r5_3` (its op type 3) -> `r5`
  const m = /^(?:cluster_)?r(\d+)(?:_\d+)?$/.exec(key);
  return m ? "r" + m[1] : "";
}

function groupOf(data, key, nodeId) {
  if (data.groups[key]) return key;
  for (const [gkey, group] of Object.entries(data.groups)) {
    if (!group.collapsed && group.kind === "chain" && group.members.includes(nodeId)) return gkey;
  }
  return "";
}

function caseDetails(data, site) {
  // a user's branch: the statement, and which TraceGraph branch points it stands for
  const line = data.source_lines[site.location];
  const ways = site.arms.map(([b, s, label]) => [esc(label), `#${b} → #${s}`, esc(data.nodes[s].op_type || data.nodes[s].kind)]);
  return `<h4>${esc(site.text || "if")}</h4>` +
    `<div class="terra-muted">a Python branch · <code>${esc(where(data, site.location))}</code></div>` +
    (line ? `<div class="terra-source">${esc(line.trim())}</div>` : "") +
    `<div class="terra-muted">${new Set(site.arms.map((a) => a[0])).size} branch point(s): one per path that reaches it</div>` +
    rows(ways);
}

function describe(data, key) {
  if (/^u\d+$/.test(key) && data.branches[Number(key.slice(1))]) {
    return { html: caseDetails(data, data.branches[Number(key.slice(1))]), group: "" };
  }
  key = regionKey(key) || key;
  if (key.startsWith("cluster_")) key = "n" + key.slice(8);
  const members = data.elements[key] || [];
  const first = data.nodes[members[0]];
  if (!first) return { html: "", group: "" };
  let html;
  if (key[0] === "c") {
    html = `<h4>${members.length} ops on one line</h4><div class="terra-muted"><code>${esc(where(data, first.location))}</code></div>` +
      (data.source_lines[first.location] ? `<div class="terra-source">${esc(data.source_lines[first.location].trim())}</div>` : "") +
      rows(members.map((m) => [`#${m}`, esc(data.nodes[m].op_type), esc(data.nodes[m].outputs.map(specText).join(", "))]));
  } else if (key[0] === "r" && data.region_calls[first.op_type]) {
    html = regionDetails(data, first);
  } else if (first.kind === "loop") {
    const inside = (data.groups["l" + first.id] || { members: [] }).members;
    html = `<h4>loop @${esc(where(data, first.location))}</h4><div>trip counts: <b>${esc(first.trip_counts.join(", "))}</b></div>` +
      `<div>${inside.filter((m) => data.nodes[m].kind === "op").length} ops inside · entered ${first.hits}× while tracing</div>`;
  } else {
    html = nodeDetails(data, first);
  }
  return { html, group: groupOf(data, key, first.id) };
}

export function mountGraph(model, el) {
  const root = h("div", "terra-root terra-graph");
  const bar = h("div", "terra-toolbar");
  const title = h("span", "terra-title", "TraceGraph");
  const info = h("span", "terra-muted terra-graph-info");
  const buttons = ["Fit", "+", "−", "Reset groups"].map((label) => h("button", "terra-btn", label));
  const search = h("input", "terra-search");
  search.type = "search";
  search.placeholder = "find: op type or source text";
  search.value = model.get("search");  // kept in the model: a redrawn view (a cell's end) keeps it
  const found = h("span", "terra-muted terra-found");
  bar.append(title, info, ...buttons, search, found);
  const message = h("div", "terra-message");
  const body = h("div", "terra-graph-body");
  const pane = h("div", "terra-pane");
  const viewport = h("div", "terra-viewport");
  const minimap = h("div", "terra-minimap");  // the whole graph, and where the view is on it
  const mapImage = h("img", "terra-minimap-image");
  mapImage.alt = "overview of the whole graph";
  const mapView = h("div", "terra-minimap-view");
  minimap.append(mapImage, mapView);
  minimap.title = "overview: click to go there";
  pane.append(viewport, minimap);
  const details = h("div", "terra-details");
  details.innerHTML = '<span class="terra-muted">Hover or click a node for its details.</span>';
  body.append(pane, details);
  const legend = h("div", "terra-legend");
  legend.innerHTML = "▶ op: feed input · op ▶: fetched · yellow hexagon: a Python <i>if</i> at its line (edges <i>true</i>/<i>false</i>) · " +
    "grey dashed edges: a region's or a line's variants (<i>compiled</i>, <i>op by op</i>, a spec) · " +
    "dashed: ops on one line (double-click to expand) · purple: loop · " +
    "green/blue [+]: a region's compiled call (double-click for its ops) · " +
    '<i style="color:#e8590c">orange</i>: current iteration · <i style="background:#ffec99">yellow</i>: new';
  root.append(bar, message, body, legend);
  el.append(root);

  let data = parseData(model.get("graph_json"));
  let svg = null, base = null, view = null, moved = false, fitted = false;

  function applyView() {
    if (svg && view) svg.setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`);
    drawMinimap();
  }
  // The first view of a graph keeps Graphviz's 10 pt labels legible: pixels per SVG unit at
  // least MIN_SCALE (a large graph is shown from its top; drag to pan, the overview shows
  // where). Fit shows the whole graph however large. Neither blows a small graph up beyond
  // MAX_SCALE.
  const MIN_SCALE = 0.8, MAX_SCALE = 1.25;
  function pane_() {
    return [viewport.clientWidth || 800, viewport.clientHeight || 420];
  }
  function paneScale(w, h) {
    return Math.min(viewport.clientWidth / w, viewport.clientHeight / h);
  }
  function show(scale, top) {
    const [pw, ph] = pane_();
    const w = pw / scale, h = ph / scale;
    view = { x: base.x + (base.w - w) / 2, y: top && base.h > h ? base.y : base.y + (base.h - h) / 2, w, h };
    root.dataset.scale = scale.toFixed(3);
    applyView();
  }
  function fitScale() {
    const [pw, ph] = pane_();
    return Math.min(pw / base.w, ph / base.h, MAX_SCALE);
  }
  function fit() {  // the Fit button: every node in the pane; later redraws fit again
    if (!base) return;
    moved = false;
    fitted = true;
    show(fitScale(), false);
  }
  function firstView() {
    if (base) show(Math.min(Math.max(fitScale(), MIN_SCALE), MAX_SCALE), true);
  }
  function zoom(factor, cx, cy) {
    if (!view) return;
    if (cx === undefined) { cx = view.x + view.w / 2; cy = view.y + view.h / 2; }
    const [pw, ph] = pane_();
    if (factor > 1) {  // zooming out: no further than the whole graph (or MIN_SCALE)
      const lowest = Math.min(fitScale(), MIN_SCALE);
      factor = Math.min(factor, pw / lowest / view.w, ph / lowest / view.h);
      if (factor <= 1) return;
    } else {  // zooming in: no further than 4x MAX_SCALE
      factor = Math.max(factor, pw / (4 * MAX_SCALE) / view.w);
      if (factor >= 1) return;
    }
    view = { x: cx - (cx - view.x) * factor, y: cy - (cy - view.y) * factor, w: view.w * factor, h: view.h * factor };
    root.dataset.scale = paneScale(view.w, view.h).toFixed(3);
    moved = true;
    applyView();
  }
  function drawMinimap() {
    // shown while part of the graph is out of the pane
    const whole = !base || !view || (view.x <= base.x + 1 && view.y <= base.y + 1 &&
      view.x + view.w >= base.x + base.w - 1 && view.y + view.h >= base.y + base.h - 1);
    minimap.style.display = whole ? "none" : "block";
    root.dataset.minimap = whole ? "hidden" : "shown";
    if (whole) return;
    const size = 150 / Math.max(base.w, base.h);
    const mw = Math.max(base.w * size, 24), mh = Math.max(base.h * size, 24);
    minimap.style.width = `${mw}px`;
    minimap.style.height = `${mh}px`;
    const x0 = Math.max(view.x, base.x), y0 = Math.max(view.y, base.y);
    const x1 = Math.min(view.x + view.w, base.x + base.w), y1 = Math.min(view.y + view.h, base.y + base.h);
    Object.assign(mapView.style, {
      left: `${((x0 - base.x) / base.w) * mw}px`, top: `${((y0 - base.y) / base.h) * mh}px`,
      width: `${Math.max(((x1 - x0) / base.w) * mw, 2)}px`, height: `${Math.max(((y1 - y0) / base.h) * mh, 2)}px`,
    });
  }
  function goTo(e) {  // a click on the overview: the view's middle goes there
    e.stopPropagation();
    if (!base || !view) return;
    const box = minimap.getBoundingClientRect();
    const x = base.x + ((e.clientX - box.left) / box.width) * base.w;
    const y = base.y + ((e.clientY - box.top) / box.height) * base.h;
    view = { ...view, x: x - view.w / 2, y: y - view.h / 2 };
    moved = true;
    applyView();
  }
  function toSvg(e) {
    const pt = svg.createSVGPoint();
    pt.x = e.clientX; pt.y = e.clientY;
    return pt.matrixTransform(svg.getScreenCTM().inverse());
  }
  function drawSvg() {
    viewport.innerHTML = model.get("svg");
    svg = viewport.querySelector("svg");
    if (!svg) return;
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
    for (const a of svg.querySelectorAll("a")) a.removeAttribute("xlink:title");
    for (const t of svg.querySelectorAll("g.node > title, g.edge > title, g.cluster > title")) t.remove();
    const vb = svg.viewBox.baseVal;
    base = { x: vb.x, y: vb.y, w: vb.width, h: vb.height };
    mapImage.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(model.get("svg"));
    if (moved && view) applyView(); else if (fitted) fit(); else firstView();
    mark();
    find();
  }
  function elementFor(key) {
    if (!svg || !key) return null;
    return svg.querySelector(`[id="${key}"]`) ||
      (key[0] === "n" ? svg.querySelector(`[id="cluster_${key.slice(1)}"]`) : null) ||
      (key[0] === "r" ? svg.querySelector(`[id="cluster_${key}"]`) : null);
  }
  function mark() {
    if (!svg) return;
    for (const cls of ["terra-current", "terra-new", "terra-selected"]) {
      for (const node of svg.querySelectorAll("." + cls)) node.classList.remove(cls);
    }
    const cur = new Set();
    const ids = new Set(model.get("current"));
    for (const id of ids) cur.add(data.keyOf.get(id));
    data.branches.forEach((site, k) => {  // a case node is on the path its arm took
      if (site.arms.some(([b, s]) => ids.has(b) && ids.has(s))) cur.add(`u${k}`);
    });
    for (const key of cur) elementFor(key)?.classList.add("terra-current");
    for (const id of model.get("new_nodes")) elementFor(data.keyOf.get(id))?.classList.add("terra-new");
    for (const edge of svg.querySelectorAll("g.edge")) {
      const m = /^e_(\w+?)_(\w+)$/.exec(edge.id);
      if (m && cur.has(m[1]) && cur.has(m[2])) edge.classList.add("terra-current");
    }
    elementFor(model.get("selected"))?.classList.add("terra-selected");
    root.dataset.current = String(cur.size);
  }
  function matches(query) {
    // drawn elements holding a node whose op type or source line contains `query`
    const q = query.trim().toLowerCase();
    if (!q) return [];
    const keys = new Set();
    for (const n of data.nodes) {
      const line = data.source_lines[n.location] || "";
      const call = data.region_calls[n.op_type];
      const named = call ? `${data.variant_labels[n.id] || call.label} ${call.name}`.toLowerCase() : "";
      if ((n.op_type || "").toLowerCase().includes(q) || line.toLowerCase().includes(q) || named.includes(q)) {
        keys.add(data.keyOf.get(n.id));
      }
    }
    data.branches.forEach((site, k) => {
      if (`${site.text} ${site.location}`.toLowerCase().includes(q)) keys.add(`u${k}`);
    });
    return [...keys].map(elementFor).filter(Boolean);
  }
  function find() {
    if (!svg) return;
    for (const node of svg.querySelectorAll(".terra-match")) node.classList.remove("terra-match");
    const hits = matches(search.value);
    for (const node of hits) node.classList.add("terra-match");
    found.textContent = search.value.trim() ? `${hits.length} found` : "";
    root.dataset.found = String(hits.length);
    if (!hits.length || !view) return;
    const r = hits[0].getBoundingClientRect();  // pan (not zoom): the first match to the middle
    const c = toSvg({ clientX: r.x + r.width / 2, clientY: r.y + r.height / 2 });
    view = { ...view, x: c.x - view.w / 2, y: c.y - view.h / 2 };
    moved = true;
    applyView();
  }
  function showDetails(key) {
    const { html, group } = describe(data, key);
    details.innerHTML = html || '<span class="terra-muted">Hover or click a node for its details.</span>';
    details.dataset.key = key;
    if (!group) return;
    const collapsed = data.groups[group].collapsed;
    const kind = data.groups[group].kind;
    const btn = h("button", "terra-btn terra-toggle",
      collapsed ? (kind === "region" ? "Expand: show its ops" : "Expand") : "Collapse " + kind);
    btn.addEventListener("click", () => toggle(group));
    details.prepend(btn);
  }
  function toggle(key) {
    const next = model.get("toggled").slice();
    const i = next.indexOf(key);
    if (i >= 0) next.splice(i, 1); else next.push(key);
    model.set("toggled", next);
    model.save_changes();
  }
  function redrawData() {
    data = parseData(model.get("graph_json"));
    const loops = data.nodes.filter((n) => n.kind === "loop").length;
    const ifs = data.branches.filter((b) => b.kind === "if").length;
    // the engine's op-level partings (region variants included) are not the user's branches
    info.textContent = `${data.nodes.length} nodes · ${Object.keys(data.elements).length} drawn · ` +
      `${loops} loops · ${ifs} Python ${ifs === 1 ? "if" : "ifs"} · ` +
      `${(data.branch_points || []).length} op-level partings`;
    mark();
    find();  // the picture may have been drawn before this data came: match the search again
    if (model.get("selected")) showDetails(model.get("selected"));
  }
  function keyOfTarget(target) {
    const g = target.closest && target.closest("g.node, g.cluster");
    return g ? g.id : "";
  }

  let drag = null;
  const handlers = {
    wheel: (e) => { if (!svg) return; e.preventDefault(); const p = toSvg(e); zoom(Math.exp(e.deltaY * 0.0015), p.x, p.y); },
    pointerdown: (e) => { if (view) drag = { x: e.clientX, y: e.clientY, view: { ...view }, far: false }; },
    pointermove: (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (!drag.far && Math.hypot(dx, dy) < 4) return;
      drag.far = true;
      viewport.classList.add("terra-dragging");
      const s = Math.max(drag.view.w / viewport.clientWidth, drag.view.h / viewport.clientHeight);
      view = { ...drag.view, x: drag.view.x - dx * s, y: drag.view.y - dy * s };
      moved = true;
      applyView();
    },
    pointerup: (e) => {
      const click = drag && !drag.far;
      drag = null;
      viewport.classList.remove("terra-dragging");
      if (!click) return;
      const key = keyOfTarget(e.target);
      model.set("selected", key);
      model.save_changes();
      mark();
      if (key) showDetails(key);
    },
    dblclick: (e) => { const key = keyOfTarget(e.target); const { group } = describe(data, key); if (group) toggle(group); },
    mouseover: (e) => { if (!drag) { const key = keyOfTarget(e.target); if (key) showDetails(key); } },
    mouseleave: () => { drag = null; const sel = model.get("selected"); if (sel) showDetails(sel); },
  };
  for (const [name, fn] of Object.entries(handlers)) viewport.addEventListener(name, fn);
  minimap.addEventListener("pointerdown", goTo);
  // typing sets the model; its change event (for every view of it) runs the search once
  search.addEventListener("input", () => { model.set("search", search.value); model.save_changes(); });
  const onSearch = () => { if (search.value !== model.get("search")) search.value = model.get("search"); find(); };
  buttons[0].addEventListener("click", fit);
  buttons[1].addEventListener("click", () => zoom(1 / 1.4));
  buttons[2].addEventListener("click", () => zoom(1.4));
  buttons[3].addEventListener("click", () => { model.set("toggled", []); model.save_changes(); });

  const onMessage = () => { message.textContent = model.get("layout_message"); };
  const subscriptions = [
    ["change:svg", drawSvg], ["change:graph_json", redrawData], ["change:current", mark],
    ["change:new_nodes", mark], ["change:selected", mark], ["change:layout_message", onMessage],
    ["change:search", onSearch],
  ];
  for (const [event, fn] of subscriptions) model.on(event, fn);
  redrawData();
  drawSvg();
  onMessage();
  return () => {
    for (const [event, fn] of subscriptions) model.off(event, fn);
    root.remove();
  };
}

// @terra-entry
function render({ model, el }) {
  return mountGraph(model, el);
}

export default { render };
