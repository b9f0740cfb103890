"""Summaries and Markdown tables of ``benchmarks/paper.py`` (no TensorFlow imported here).

``summarise`` turns one program's raw runs into its JSON entry; ``tables`` prints the document:
throughput (paper Figure 5), the runner breakdown and what Terra did (Figure 6), tf.function's
coverage (Table 1), and the issue's targets, each marked met or not.
"""

from __future__ import annotations

import statistics

MODES = ("eager", "function", "lazy", "coexec", "coexec_xla")
KEYS = ("python_exec", "python_stall", "graph_exec", "graph_stall")


def eager_noise(runs: dict[str, list[dict]]) -> float:
    """How far eager's rounds end from its first: 0.0 where eager is reproducible."""
    return max((r.get("max_abs_diff", 0.0) for r in runs["eager"] if "error" not in r),
               default=0.0)


def summarise(name: str, runs: dict[str, list[dict]], why: str | None,
              checks: dict[str, list[dict]] | None = None) -> dict:
    """The JSON entry of program ``name`` from its runs per mode; ``why`` is the program's
    reason tf.function fails or differs (its FUNCTION_WHY); ``checks``: one more round of the
    modes with op determinism, which then decides equality (eager is not reproducible)."""
    eager = [r["it_s"] for r in runs["eager"] if "error" not in r]
    eager_rate = statistics.median(eager) if eager else None
    # where eager itself is not reproducible (CPU kernels that sum in parallel, amplified by NMS
    # choices), a mode as close as eager is to itself is equal, unless a deterministic round says
    noise = eager_noise(runs)
    modes, details = {}, {}
    for mode in MODES:
        check = next((r for r in (checks or {}).get(mode, ()) if "equal" in r), None)
        modes[mode], details[mode] = _summary(runs[mode], eager_rate, noise, check)
        if mode == "function":
            details[mode]["why"] = why
    return {"name": name, "modes": modes, "details": details}


def _summary(records: list[dict], eager_rate: float | None, noise: float,
             check: dict | None = None) -> tuple[dict, dict]:
    ok = [r for r in records if "error" not in r]
    errors = [r["error"] for r in records if "error" in r]
    if not ok:
        error = errors[0] if errors else "not run"
        return ({"it_s": None, "ratio_to_eager": None, "equal_to_eager": None, "error": error},
                {"rounds": len(records)})
    ok.sort(key=lambda r: r["it_s"])
    chosen = ok[len(ok) // 2]  # the median run gives the breakdown shown
    rates = [r["it_s"] for r in ok]
    flags = [r.get("equal") or r.get("max_abs_diff", 1.0) <= noise for r in ok]
    if all(r["mode"] == "eager" for r in ok):
        flags = [True] * len(ok)  # the reference itself; its spread is reported as noise
    elif check is not None:
        flags = [check["equal"]]  # eager repeats itself there: no noise to allow for
    equal = None if None in flags else all(flags)
    diff = max(r.get("max_abs_diff", 0.0) for r in ok)
    error = errors[0] if errors else None
    if equal is False:
        diff = check["max_abs_diff"] if check is not None else diff
        where = " with op determinism" if check is not None else ""
        error = f"wrong: final weights differ from eager's{where} (max |diff| {diff:.2g})"
    rate = statistics.median(rates)
    ratio = rate / eager_rate if equal and error is None and eager_rate else None
    detail = {"rounds": len(records), "it_s_runs": rates, "spread": [rates[0], rates[-1]],
              "cpu_ms": chosen["cpu_ms"], "max_abs_diff": diff, "eager_noise": noise}
    for key in ("breakdown_ms", "phases", "steady_phases", "fallbacks", "explain", "regions",
                "traces"):
        if key in chosen:
            detail[key] = chosen[key]
    if check is not None:
        detail["deterministic_max_abs_diff"] = check["max_abs_diff"]
    summary = {"it_s": rate, "ratio_to_eager": ratio, "equal_to_eager": equal, "error": error}
    return summary, detail


# -- tables ------------------------------------------------------------------------------------


def _outcome(mode: dict) -> str:
    """One word for a mode that has no ratio: fails, raises, wrong, timeout, error."""
    error = mode["error"] or ""
    return error.split(":")[0].split(" at ")[0] if error else "-"


def _cell(mode: dict, spread: list | None) -> str:
    if mode["it_s"] is None or mode["ratio_to_eager"] is None and mode["error"]:
        return _outcome(mode)
    text = f"{mode['it_s']:.2f}"
    if spread and mode["it_s"]:
        text += f" ±{50 * (spread[1] - spread[0]) / mode['it_s']:.0f}%"
    if mode["ratio_to_eager"] is not None:
        text += f" ({mode['ratio_to_eager']:.2f}x)"
    return text


def _ratio(a: dict, b: dict) -> str:
    if a["ratio_to_eager"] is None or b["ratio_to_eager"] is None:
        return "-"
    return f"{a['it_s'] / b['it_s']:.2f}"


def throughput_table(programs: list[dict]) -> list[str]:
    lines = ["| program | eager it/s | function | lazy | coexec | coexec_xla | coexec/function "
             "| coexec/lazy |", "|---" * 8 + "|"]
    for p in programs:
        m, d = p["modes"], p["details"]
        cells = [_cell(m[mode], d[mode].get("spread")) for mode in MODES]
        ratios = [_ratio(m["coexec"], m["function"]), _ratio(m["coexec"], m["lazy"])]
        lines.append(f"| {p['name']} | " + " | ".join(cells + ratios) + " |")
    return lines


def _ms(detail: dict) -> str:
    ms = detail.get("breakdown_ms")
    return " / ".join(f"{ms[k]:.0f}" for k in KEYS) if ms else "-"


def _diffs(details: dict) -> str:
    values = [details[m].get("max_abs_diff") for m in ("lazy", "coexec", "coexec_xla")]
    return " / ".join("-" if v is None else f"{v:.1g}" for v in values)


def terra_table(programs: list[dict]) -> list[str]:
    lines = ["| program | coexec ms/it: py exec / py stall / graph exec / graph stall | lazy ms/it "
             "| tracing its | fallbacks | coexec its (timed) | regions | max abs diff to eager: "
             "lazy / coexec / coexec_xla |", "|---" * 8 + "|"]
    for p in programs:
        d = p["details"]["coexec"]
        phases, steady = d.get("phases", {}), d.get("steady_phases", {})
        regions = d.get("regions")
        regions = "off (--no-regions)" if regions is None else regions
        lines.append(
            f"| {p['name']} | {_ms(d)} | {_ms(p['details']['lazy'])} "
            f"| {phases.get('tracing', '-')} | {d.get('fallbacks', '-')} "
            f"| {steady.get('coexec', '-')} | {regions} | {_diffs(p['details'])} |")
    return lines


def function_table(programs: list[dict]) -> list[str]:
    lines = ["| program | tf.function | why (Table 1) |", "|---|---|---|"]
    for p in programs:
        m, d = p["modes"]["function"], p["details"]["function"]
        if m["error"] is None:
            outcome = f"runs, equal to eager ({d.get('traces', '?')} traces)"
        else:
            outcome = m["error"].replace("|", "/")[:120]
        lines.append(f"| {p['name']} | {outcome} | {d.get('why') or '-'} |")
    return lines


def targets(programs: list[dict]) -> list[str]:
    """The issue's four targets, each with the programs that miss it."""
    def missing(test) -> str:
        miss = [p["name"] for p in programs if not test(p["modes"])]
        return "met" if not miss else "not met: " + ", ".join(miss)

    def ok(m: dict) -> bool:
        return m["ratio_to_eager"] is not None

    def rate(m: dict, mode: str) -> float:
        return m[mode]["it_s"] if ok(m[mode]) else 0.0

    return [
        "- coexec equal to eager on every program: "
        + missing(lambda m: m["coexec"]["equal_to_eager"] is True),
        "- coexec faster than eager: " + missing(lambda m: rate(m, "coexec") > rate(m, "eager")),
        "- coexec within 15% of tf.function where it runs correctly: " + missing(
            lambda m: not ok(m["function"]) or rate(m, "coexec") >= 0.85 * rate(m, "function")),
        "- coexec faster than lazy: " + missing(
            lambda m: ok(m["lazy"]) and rate(m, "coexec") > rate(m, "lazy")),
    ]


def findings(programs: list[dict]) -> list[str]:
    """Every Terra mode that raised, hung or gave results different from eager's."""
    lines = []
    for p in programs:
        for mode in ("lazy", "coexec", "coexec_xla"):
            error = p["modes"][mode]["error"]
            if error:
                lines.append(f"- {p['name']} / {mode}: {error}")
        noise = p["details"]["eager"].get("eager_noise")
        checked = "deterministic_max_abs_diff" in p["details"]["coexec"]
        if noise:
            judged = "modes within that count as equal"
            if checked:
                judged = ("equality judged in one more round with TensorFlow's op determinism, "
                          "where eager repeats itself")
            lines.append(f"- {p['name']} / eager: not reproducible run to run (max |diff| "
                         f"{noise:.2g} between eager rounds); {judged}")
    return lines or ["- none"]


def tables(document: dict) -> str:
    """The Markdown report of a harness run."""
    programs, meta = document["programs"], document.get("meta", {})
    head = (f"Iterations/s after {meta.get('warmup')} warm-up iterations, median of "
            f"{meta.get('repeats')} rounds of {meta.get('iterations')} (coexec_xla: "
            f"{meta.get('xla_rounds')}; ± half the spread), ratio to eager in brackets; "
            f"{meta.get('cpus')} CPUs; `{meta.get('command')}`.")
    parts = [head, "", *throughput_table(programs), "",
             "Terra: runner breakdown of the timed iterations (paper Figure 6), what ran", "",
             *terra_table(programs), "", "tf.function coverage (paper Table 1)", "",
             *function_table(programs), "", "Targets", "", *targets(programs), "",
             "Terra modes that failed or differ from eager", "", *findings(programs)]
    return "\n".join(parts)
