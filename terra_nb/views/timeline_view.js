// terra-nb TimelineView: an overview of every iteration, the runners' lanes over a stretch of the
// run and the exec/stall summary (SVGs drawn by Python), with pan and zoom, hover details and a
// Chrome-trace export. No build step.

/**
 * @typedef {Object} TimelineTraits
 * @property {string} timeline_svg  overview + PythonRunner / GraphRunner lanes of the shown range;
 *                                  its data-t0/t1/total (loop seconds) and data-left/right (lane
 *                                  x extent) say how to pan and zoom
 * @property {string} summary_svg   per runner, the mean iteration split into what it did
 * @property {number} window        iterations shown while following the newest
 * @property {number[]} view_range  [start, end] seconds from the first iteration's start; []
 *                                  follows the newest `window` iterations. Python draws it.
 * Custom messages: the view sends {type: "chrome_trace"}; Python answers
 * {type: "chrome_trace", json} and the view downloads it as terra-trace.json.
 */

function timelineNode(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function moveTitles(container) {
  for (const title of container.querySelectorAll("title")) {
    title.parentNode.setAttribute("data-tip", title.textContent);
    title.remove();
  }
}

function download(text, name) {
  const url = URL.createObjectURL(new Blob([text], { type: "application/json" }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** The shown range and the lanes' geometry, from the SVG's data attributes. */
function timelineGeometry(svg) {
  const num = (name) => Number(svg.getAttribute(`data-${name}`));
  const box = svg.getBoundingClientRect();
  const width = Number(svg.getAttribute("width")) || box.width;
  return {
    t0: num("t0"), t1: num("t1"), total: num("total"), left: num("left"), right: num("right"),
    follow: svg.getAttribute("data-follow") === "1",
    // a pointer's x in the SVG's own units (the SVG may be drawn narrower than it is wide)
    x: (clientX) => (clientX - box.left) * (width / (box.width || width)),
  };
}

function clampRange(a, b, total) {
  const width = Math.min(Math.max(b - a, 1e-5), total);
  let start = Math.max(0, Math.min(a, total - width));
  if (width >= total) start = 0;
  return [start, start + width];
}

export function mountTimeline(model, el) {
  const root = timelineNode("div", "terra-root terra-timeline");
  const bar = timelineNode("div", "terra-toolbar");
  const windowLabel = timelineNode("span", "terra-muted terra-caption");
  const buttons = {};
  for (const [name, text, title] of [
    ["left", "◀", "Earlier"], ["right", "▶", "Later"], ["in", "+", "Zoom in"],
    ["out", "−", "Zoom out"], ["all", "All", "Every iteration"],
    ["latest", "Latest", "Follow the newest iterations"],
  ]) {
    buttons[name] = timelineNode("button", `terra-btn terra-${name}`, text);
    buttons[name].title = title;
  }
  const exportButton = timelineNode("button", "terra-btn terra-export", "Chrome trace ⤓");
  exportButton.title = "Download every span as Chrome-trace JSON (opens in ui.perfetto.dev)";
  bar.append(timelineNode("span", "terra-title", "Timeline"), windowLabel,
    ...Object.values(buttons), exportButton);
  const lanes = timelineNode("div", "terra-timeline-lanes");
  lanes.title = "wheel: zoom · drag: pan · click the overview: go there";
  const summary = timelineNode("div", "terra-timeline-summary");
  const tip = timelineNode("div", "terra-tip");
  root.append(bar, lanes, summary, tip);
  el.append(root);
  let pending = null;

  function draw() {
    lanes.innerHTML = model.get("timeline_svg");
    summary.innerHTML = model.get("summary_svg");
    moveTitles(lanes);
    moveTitles(summary);
    const svg = lanes.querySelector("svg");
    windowLabel.textContent = svg ? svg.getAttribute("data-caption") : "no iterations yet";
    root.dataset.iterations = svg ? svg.getAttribute("data-iterations") : "0";
    root.dataset.range = (model.get("view_range") || []).join(",");
  }
  function setRange(range) {
    root.dataset.range = range.join(",");
    clearTimeout(pending);  // wheel events come in bursts: Python draws the last one
    pending = setTimeout(() => { model.set("view_range", range); model.save_changes(); }, 60);
  }
  function geometry() {
    const svg = lanes.querySelector("svg");
    return svg && svg.hasAttribute("data-total") ? timelineGeometry(svg) : null;
  }
  function zoom(factor, clientX) {
    const g = geometry();
    if (!g) return;
    const at = clientX === undefined ? (g.t0 + g.t1) / 2
      : g.t0 + ((g.x(clientX) - g.left) / (g.right - g.left)) * (g.t1 - g.t0);
    setRange(clampRange(at - (at - g.t0) * factor, at + (g.t1 - at) * factor, g.total));
  }
  function pan(fraction) {
    const g = geometry();
    if (g) setRange(clampRange(g.t0 + fraction * (g.t1 - g.t0), g.t1 + fraction * (g.t1 - g.t0),
      g.total));
  }
  function hover(e) {
    const target = e.target.closest && e.target.closest("[data-tip]");
    if (!target) { tip.style.display = "none"; return; }
    tip.textContent = target.getAttribute("data-tip");
    tip.style.display = "block";
    // placed in the root's own coordinates: a front end may transform an ancestor, which
    // moves a `position: fixed` element away from the pointer
    const box = root.getBoundingClientRect();
    let left = e.clientX - box.left + 12;
    if (e.clientX + 12 + tip.offsetWidth > window.innerWidth) left -= tip.offsetWidth + 24;
    tip.style.left = `${left}px`;
    tip.style.top = `${e.clientY - box.top + 14}px`;
  }
  let drag = null;
  function pointerdown(e) {
    const g = geometry();
    if (!g || e.button !== 0) return;
    if (e.target.closest && e.target.closest(".terra-overview")) {
      const at = ((g.x(e.clientX) - g.left) / (g.right - g.left)) * g.total;
      const half = (g.t1 - g.t0) / 2;
      setRange(clampRange(at - half, at + half, g.total));
      return;
    }
    drag = { x: e.clientX, g };
  }
  function pointerup(e) {
    if (!drag) return;
    const { g } = drag;
    const dx = g.x(e.clientX) - g.x(drag.x);
    drag = null;
    lanes.classList.remove("terra-dragging");
    if (Math.abs(dx) < 3) return;  // a click: hover details, no pan
    const dt = (-dx / (g.right - g.left)) * (g.t1 - g.t0);
    setRange(clampRange(g.t0 + dt, g.t1 + dt, g.total));
  }
  function pointermove(e) {
    hover(e);
    if (drag && Math.abs(e.clientX - drag.x) >= 3) lanes.classList.add("terra-dragging");
  }
  function wheel(e) {
    if (!geometry()) return;
    e.preventDefault();
    zoom(e.deltaY < 0 ? 0.7 : 1 / 0.7, e.clientX);
  }
  function onMessage(msg) {
    if (msg && msg.type === "chrome_trace") {
      root.dataset.exported = String(msg.json.length);
      download(msg.json, "terra-trace.json");
    }
  }
  const hide = () => { tip.style.display = "none"; };
  const ask = () => model.send({ type: "chrome_trace" });
  const clicks = {
    left: () => pan(-0.5), right: () => pan(0.5), in: () => zoom(0.5), out: () => zoom(2),
    all: () => { const g = geometry(); if (g) setRange([0, g.total]); },
    latest: () => { clearTimeout(pending); model.set("view_range", []); model.save_changes(); },
  };
  for (const [name, fn] of Object.entries(clicks)) buttons[name].addEventListener("click", fn);
  root.addEventListener("mousemove", pointermove);
  root.addEventListener("mouseleave", hide);
  lanes.addEventListener("pointerdown", pointerdown);
  window.addEventListener("pointerup", pointerup);
  lanes.addEventListener("wheel", wheel, { passive: false });
  exportButton.addEventListener("click", ask);
  const subscriptions = [
    ["change:timeline_svg", draw], ["change:summary_svg", draw], ["msg:custom", onMessage],
  ];
  for (const [event, fn] of subscriptions) model.on(event, fn);
  draw();
  return () => {
    for (const [event, fn] of subscriptions) model.off(event, fn);
    window.removeEventListener("pointerup", pointerup);
    clearTimeout(pending);
    root.remove();
  };
}

// @terra-entry
function render({ model, el }) {
  return mountTimeline(model, el);
}

export default { render };
