// terra-nb Dashboard: counters, the TraceGraph view and the timeline in one widget. Python
// prepends graph_view.js and timeline_view.js (cut before their own `render`) to this file, so
// mountGraph and mountTimeline are in scope: one module, no bundler.

/**
 * @typedef {Object} DashboardTraits
 * @property {string} counters  JSON: iteration, phase, iterations_per_s, fallbacks,
 *                              last_fallback, ops, nodes, status, updates
 * plus every GraphTraits and TimelineTraits field.
 */

function counterCell(label, value, cls) {
  const cell = document.createElement("span");
  cell.className = "terra-counter " + (cls || "");
  cell.append(label);
  const b = document.createElement("b");
  b.textContent = value;
  cell.append(b);
  return cell;
}

function drawCounters(box, text) {
  const c = JSON.parse(text || "{}");
  box.replaceChildren();
  const phase = document.createElement("span");
  phase.className = `terra-phase-badge terra-phase-${c.phase || "eager"}`;
  phase.textContent = c.phase || "—";
  box.append(
    counterCell("iteration", c.iteration >= 0 ? String(c.iteration) : "—", "terra-counter-iteration"),
    phase,
    counterCell("iterations/s", (c.iterations_per_s ?? 0).toFixed(1), "terra-counter-rate"),
    counterCell("fallbacks", String(c.fallbacks ?? 0), "terra-counter-fallbacks"),
    counterCell("ops/iteration", c.ops === null || c.ops === undefined ? "—" : String(c.ops), "terra-counter-ops"),
    counterCell("graph nodes", String(c.nodes ?? 0), "terra-counter-nodes"),
  );
  const status = document.createElement("span");
  status.className = "terra-muted terra-status";
  status.textContent = `${c.status || ""} · ${c.updates ?? 0} updates`;
  box.append(status);
  if (c.last_fallback) box.title = "last fallback: " + c.last_fallback;
  box.dataset.iteration = String(c.iteration);
  box.dataset.status = c.status || "";
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "terra-root terra-dashboard";
  const counters = document.createElement("div");
  counters.className = "terra-counters";
  const graph = document.createElement("div");
  graph.className = "terra-section";
  const timeline = document.createElement("div");
  timeline.className = "terra-section";
  root.append(counters, graph, timeline);
  el.append(root);
  const update = () => drawCounters(counters, model.get("counters"));
  model.on("change:counters", update);
  update();
  const cleanups = [mountGraph(model, graph), mountTimeline(model, timeline)];
  return () => {
    model.off("change:counters", update);
    for (const cleanup of cleanups) cleanup();
    root.remove();
  };
}

export default { render };
