"""A plan as the table ``print(plan)`` shows: one row per layer, its regions drawn as columns."""

from __future__ import annotations

from ..units import format_bytes, format_seconds
from .types import _PLAN_FORMAT, MenuEntry, OpProfile, Plan, StepPeak


def plan_table(plan: Plan) -> str:
    """The plan as a table (``print(plan)``)."""
    p = plan.profile
    forward = p.forward_seconds
    share = plan.predicted_recompute_seconds / forward if forward > 0 else 0.0
    held = plan.held_after_forward()
    at_end = p.input_bytes + sum(held)
    kind = "one region per layer at most" if p.max_region_layers == 1 else "nested regions"
    lines = [
        f"remat checkpoint plan: {len(p.layers)} layers, activation budget "
        f"{format_bytes(plan.memory_budget)} ({kind})",
        f"  predicted peak saved {format_bytes(plan.predicted_peak_bytes)} (no checkpoint "
        f"{format_bytes(plan.no_checkpoint_bytes)}, least possible "
        f"{format_bytes(plan.minimum_budget_bytes)})",
        f"  predicted recompute {format_seconds(plan.predicted_recompute_seconds)} = "
        f"{share:.0%} of the forward pass ({format_seconds(forward)}), with "
        f"{format_seconds(p.region_overhead_seconds)} per region",
        f"  {len(plan.regions)} checkpoint regions",
    ]
    offload = plan.offload
    if offload is not None:
        host = format_bytes(offload.host_bytes)
        if offload.host_budget is not None:
            host += f" of {format_bytes(offload.host_budget)}"
        moved = f"{len(offload.layers)} layers' saved bytes"
        if offload.inputs:
            moved += f" and {len(offload.inputs)} regions' inputs"
        lines.append(
            f"  offloads {moved} to host memory ({host}): copies "
            f"{format_seconds(offload.copy_seconds)} at {format_bytes(offload.bandwidth)}/s, "
            f"{offload.hidden_share:.0%} hidden behind compute (predicted stall "
            f"{format_seconds(offload.stall_seconds)})"
        )
    if plan.step is not None:
        lines += _step_lines(plan.step)
    if plan.timings:
        measured = ", ".join(f"{label} {format_seconds(t)}" for label, t in plan.timings)
        lines.append(f"  tuned: chose {plan.choice} by measured forward + backward ({measured})")
    width = max([len(layer.name) for layer in p.layers] + [4])
    lines += [
        "",
        f"  {'#':>4}  {'name':<{width}}  {'saves':>10} {'output':>10} {'held':>10} "
        f"{'forward':>9}  runs  regions",
        f"  {'':>4}  {'(input)':<{width}}  {'':>10} {format_bytes(p.input_bytes):>10} "
        f"{format_bytes(p.input_bytes):>10}",
    ]
    depth = max((d for _, _, d in plan.regions), default=-1) + 1
    offloaded, inputs_moved = set(plan.offloaded), set(plan.inputs_offloaded)
    if offloaded:
        depth = max(depth, 1)
    selective_regions = {plan.regions[r][0] for r in range(len(plan.regions)) if plan.keeps_ops(r)}
    for i, (layer, runs) in enumerate(zip(p.layers, plan.runs())):
        marks = [" "] * depth
        for first, last, d in plan.regions:
            if first <= i <= last:
                marks[d] = (
                    ("~" if first in selective_regions else "=")
                    if first == last
                    else "/"
                    if i == first
                    else "\\"
                    if i == last
                    else "|"
                )
        if i in offloaded:
            marks[0] = "o"
        if i in inputs_moved:
            marks[0] = "i"
        lines.append(
            f"  {i:>4}  {layer.name:<{width}}  {format_bytes(layer.saved_bytes):>10} "
            f"{format_bytes(layer.output_bytes):>10} {format_bytes(held[i]):>10} "
            f"{format_seconds(layer.forward_seconds):>9}  {runs:>4}  {''.join(marks)}"
        )
    for index, (first, _, _) in enumerate(plan.regions):
        option = plan.options[index] if index < len(plan.options) else -1
        if option < 0:
            continue
        rerun = format_seconds(p.layers[first].options[option][1])
        selective = p.selective[first]
        assert selective is not None  # an option is only given where the layer has a menu
        op_profile, entries = selective
        entry = entries[option]
        if not entry.cached:
            lines.append(
                f"  {'':>4}  {'':<{width}}  ^ layer {first} re-runs whole, up to its last "
                f"saved op: {rerun}"
            )
            continue
        lines.append(
            f"  {'':>4}  {'':<{width}}  ^ layer {first} selective: "
            f"{describe(op_profile, entry)}; holds "
            f"{format_bytes(entry.held_bytes)}, re-runs {rerun}"
        )
    lines += [
        f"  {'':>4}  {'total':<{width}}  {'':>10} {'':>10} {format_bytes(at_end):>10} "
        f"{format_seconds(forward):>9}",
        "",
        "  saves: bytes autograd saves inside the layer, besides its input and output; output:",
        "  the activation passed to the next layer; held: what the layer holds after the",
        "  forward pass under this plan (the total is the peak then; a re-run in backward",
        "  may add to it, up to the predicted peak); runs: forward evaluations per step;",
        "  regions: one column per nesting depth, / first layer, | inside, \\ last layer,",
        "  = a region of one layer, ~ one run selectively (the ops it keeps are listed above).",
    ]
    if offloaded:
        lines += [
            "  o: its saved bytes go to host memory once the next layer's forward has run, and",
            "  come back (prefetched) when backward reaches the next layer.",
        ]
    if inputs_moved:
        lines += [
            "  i: a region whose input (the previous layer's output) goes to host memory once",
            "  the next layer's forward has run, and comes back for its re-run.",
        ]
    return "\n".join(lines)


_WHERE = {
    "blocks": "while the blocks run",
    "head": "after the blocks' forward",
    "outside": "outside the blocks: no plan lowers it",
}


def _step_lines(step: StepPeak) -> list[str]:
    """The step's predicted peak against memory_budget, part by part."""
    lines = [
        f"  training step: predicted peak {format_bytes(step.predicted_peak_bytes)} of "
        f"memory_budget {format_bytes(step.memory_budget)}, {_WHERE[step.where]}",
        f"    at its start {format_bytes(step.fixed_bytes)} (parameters, gradients, "
        "optimizer state)",
        f"    blocks' activations {format_bytes(step.activation_bytes)}; beside them up to "
        f"{format_bytes(step.working_bytes)} (working set, temporaries)",
        f"    after the blocks' forward {format_bytes(step.head_bytes)} more (head, loss); "
        f"outside the blocks {format_bytes(step.outside_bytes)}",
    ]
    if step.margin_bytes:
        lines.append(
            f"    includes {format_bytes(step.margin_bytes)} a measured step held over "
            "its prediction"
        )
    return lines


def describe(profile: OpProfile, entry: MenuEntry) -> str:
    """Which ops an entry keeps, for a plan's table: 'keeps 4 of 31 ops: aten.mm x3, ...'."""
    kept = [profile.ops[i].name.replace(".default", "") for i in sorted(entry.cached)]
    counts: dict[str, int] = {}
    for name in kept:
        counts[name] = counts.get(name, 0) + 1
    listed = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in counts.items())
    return f"keeps {len(kept)} of {len(profile.ops)} ops" + (f": {listed}" if listed else "")


_PLAN_FORMAT.append(plan_table)
