// terra-nb TimelineView: the runners' lanes over the last iterations and the exec/stall summary
// (SVGs drawn by Python), with hover details and a Chrome-trace export. No build step.

/**
 * @typedef {Object} TimelineTraits
 * @property {string} timeline_svg  PythonRunner / GraphRunner lanes of the last `window` iterations
 * @property {string} summary_svg   exec/stall breakdown per runner (the paper's Figure 6)
 * @property {number} window        iterations shown
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

export function mountTimeline(model, el) {
  const root = timelineNode("div", "terra-root terra-timeline");
  const bar = timelineNode("div", "terra-toolbar");
  const windowLabel = timelineNode("span", "terra-muted");
  const exportButton = timelineNode("button", "terra-btn terra-export", "Chrome trace ⤓");
  exportButton.title = "Download every span as Chrome-trace JSON (opens in ui.perfetto.dev)";
  bar.append(timelineNode("span", "terra-title", "Timeline"), windowLabel, exportButton);
  const lanes = timelineNode("div", "terra-timeline-lanes");
  const summary = timelineNode("div", "terra-timeline-summary");
  const tip = timelineNode("div", "terra-tip");
  root.append(bar, lanes, summary, tip);
  el.append(root);

  function draw() {
    lanes.innerHTML = model.get("timeline_svg");
    summary.innerHTML = model.get("summary_svg");
    moveTitles(lanes);
    moveTitles(summary);
    const svg = lanes.querySelector("svg");
    const shown = svg ? svg.getAttribute("data-iterations") : "0";
    windowLabel.textContent = svg ? svg.getAttribute("data-caption") : "no iterations yet";
    root.dataset.iterations = shown;
  }
  function hover(e) {
    const target = e.target.closest && e.target.closest("[data-tip]");
    if (!target) { tip.style.display = "none"; return; }
    tip.textContent = target.getAttribute("data-tip");
    tip.style.display = "block";
    tip.style.left = `${e.clientX + 12}px`;
    tip.style.top = `${e.clientY + 12}px`;
  }
  function onMessage(msg) {
    if (msg && msg.type === "chrome_trace") {
      root.dataset.exported = String(msg.json.length);
      download(msg.json, "terra-trace.json");
    }
  }
  const hide = () => { tip.style.display = "none"; };
  const ask = () => model.send({ type: "chrome_trace" });
  root.addEventListener("mousemove", hover);
  root.addEventListener("mouseleave", hide);
  exportButton.addEventListener("click", ask);
  const subscriptions = [
    ["change:timeline_svg", draw], ["change:summary_svg", draw], ["msg:custom", onMessage],
  ];
  for (const [event, fn] of subscriptions) model.on(event, fn);
  draw();
  return () => {
    for (const [event, fn] of subscriptions) model.off(event, fn);
    root.remove();
  };
}

// @terra-entry
function render({ model, el }) {
  return mountTimeline(model, el);
}

export default { render };
