"""Plans as data (for --json) and as indented text: where each MJoin runs and which streams cross the network."""

from __future__ import annotations

from typing import Any

from windjoin.operators.pmjoin.model import RateModel, bits
from windjoin.operators.pmjoin.plan import Input, MJoin, Node, plan_cost
from windjoin.operators.pmjoin.planner import PlanReport

MAX_LISTED_VALUES = 8


def stream_names(model: RateModel, mask: int) -> list[str]:
    return [model.query.streams[b].name for b in bits(mask)]


def plan_to_dict(node: Node, model: RateModel, dest: str | None = None) -> dict[str, Any]:
    """A JSON-ready tree; an input produced away from its consumer carries `shipped` {from, to, bytes_per_s}."""
    out: dict[str, Any]
    if isinstance(node, Input):
        names = stream_names(model, node.mask)
        out = {"op": "stream" if len(names) == 1 else "input", "streams": names, "node": node.site}
    elif isinstance(node, MJoin):
        out = {
            "op": "mjoin",
            "node": node.site,
            "streams": stream_names(model, node.mask),
            "inputs": [plan_to_dict(c, model, node.site) for c in node.inputs],
        }
    else:
        cls = model.query.classes[node.class_index]
        out = {
            "op": "pmjoin",
            "equality": cls.name,
            "streams": stream_names(model, node.mask),
            "inputs": [plan_to_dict(c, model, c.site) for c in node.inputs],
            "substreams": [],
        }
        for g in node.groups:
            sub = model.restricted(node.class_index, g.values)
            out["substreams"].append(
                {
                    "values": [v.item() if hasattr(v, "item") else v for v in cls.values[g.values]],
                    "cost_bytes_per_s": plan_cost(g.plan, sub, dest),
                    "unpartitioned_plan_kept": g.fallback,
                    "plan": plan_to_dict(g.plan, sub, dest),
                }
            )
        return out
    out["rate"] = model.rate(node.mask)
    if dest is not None and node.site != dest:
        out["shipped"] = {"from": node.site, "to": dest, "bytes_per_s": model.traffic(node.mask)}
    return out


def report_to_dict(report: PlanReport, model: RateModel) -> dict[str, Any]:
    return {
        "cost_bytes_per_s": report.cost,
        "baselines_bytes_per_s": {
            "unpartitioned_heuristic": report.unpartitioned_cost,
            "optimal_unpartitioned": report.optimal_cost,
            "simple": report.simple_cost,
            "best_centralized": report.centralized_cost,
        },
        "plan": plan_to_dict(report.plan, model),
        "unpartitioned_plan": plan_to_dict(report.unpartitioned, model),
    }


def plan_lines(node: Node, model: RateModel, dest: str | None = None, indent: str = "") -> list[str]:
    """Indented text: one line per operator or input, with what is shipped where."""
    ship = ""
    if node.site is not None and dest is not None and node.site != dest:
        ship = f"  shipped {node.site} -> {dest}: {model.traffic(node.mask):.6g} B/s"
    names = " ⋈ ".join(stream_names(model, node.mask))
    if isinstance(node, Input):
        return [f"{indent}{names} @ {node.site}{ship}"]
    if isinstance(node, MJoin):
        lines = [f"{indent}MJoin @ {node.site}: {names} (rate {model.rate(node.mask):.6g}/s){ship}"]
        for child in node.inputs:
            lines.extend(plan_lines(child, model, node.site, indent + "  "))
        return lines
    cls = model.query.classes[node.class_index]
    lines = [f"{indent}PMJoin on {cls.name}: {names}, {len(node.groups)} substream groups"]
    for child in node.inputs:
        if not isinstance(child, Input):
            lines.extend(plan_lines(child, model, None, indent + "  "))
    for g in node.groups:
        sub = model.restricted(node.class_index, g.values)
        values = [str(v) for v in cls.values[g.values[:MAX_LISTED_VALUES]]]
        more = f", … ({len(g.values)} values)" if len(g.values) > MAX_LISTED_VALUES else ""
        kept = " [unpartitioned plan kept]" if g.fallback else ""
        cost = plan_cost(g.plan, sub, dest)
        lines.append(f"{indent}  substream {{{', '.join(values)}{more}}}: {cost:.6g} B/s{kept}")
        lines.extend(plan_lines(g.plan, sub, dest, indent + "    "))
    return lines


def report_text(report: PlanReport, model: RateModel) -> str:
    opt = "n/a" if report.optimal_cost is None else f"{report.optimal_cost:.6g}"
    head = [
        f"communication cost: {report.cost:.6g} B/s",
        f"  unpartitioned (Algorithm 1): {report.unpartitioned_cost:.6g}  optimal unpartitioned: {opt}  "
        f"Simple: {report.simple_cost:.6g}  best centralized: {report.centralized_cost:.6g}",
        "plan:",
    ]
    return "\n".join(head + plan_lines(report.plan, model, None, "  "))
