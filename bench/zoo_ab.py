"""A/B of bench/zoo.py between two trees: the plans remat made, its step time against HF
checkpointing at equal step peak, and the first step, from the results_cpu.json of each run.

    python bench/zoo.py --out NEW                                   # this tree
    PYTHONPATH=OLD_TREE/python python bench/zoo.py --out OLD        # the other tree's package
    python bench/zoo_ab.py --pair OLD NEW [--pair OLD2 NEW2] --out bench/results/zoo/ab.md

Pairs run back to back on one idle machine; with several pairs each figure is given per pair.
"""

from __future__ import annotations

import argparse
import json
import pathlib

PLAN_FIELDS = ("regions", "selective", "predicted_bytes", "predicted_step_bytes")


def _load(folder: str) -> dict:
    return json.loads((pathlib.Path(folder) / "results_cpu.json").read_text())


def _plans(run: dict) -> dict[tuple[str, str], tuple]:
    return {
        (model, method): tuple(entry.get(f) for f in PLAN_FIELDS)
        for model, methods in run["decoders"].items()
        for method, entry in methods.items()
        if method.startswith("remat")
    }


def _ratio(run: dict, model: str) -> float:
    methods = run["decoders"][model]
    return (
        methods["remat@hf_gradient_checkpointing"]["median_s"]
        / methods["hf_gradient_checkpointing"]["median_s"]
    )


def _first(run: dict, model: str) -> float:
    op = run["first_steps"][model]["op"]
    return op["first_s"] / op["later_s"]


def _per_model(title: str, pairs: list[tuple[dict, dict]], models: list[str], cell) -> list[str]:
    """A table of one figure per model: old / new, a column per pair."""
    lines = ["", title, ""]
    lines += ["| model | " + " | ".join(f"pair {i + 1}" for i in range(len(pairs))) + " |"]
    lines += ["| --- |" + " ---: |" * len(pairs)]
    for model in models:
        cells = [f"{cell(old, model)} / {cell(new, model)}" for old, new in pairs]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return lines


def report(pairs: list[tuple[dict, dict]], names: list[str]) -> str:
    lines = [f"# A/B of bench/zoo.py: {names[0]} against {names[1]}", ""]
    lines += [f"Pairs run back to back: {len(pairs)}. Each cell: old / new, per pair.", ""]
    same, differ = 0, []
    for old, new in pairs:
        a, b = _plans(old), _plans(new)
        for key in sorted(a.keys() & b.keys()):
            if a[key] == b[key]:
                same += 1
            else:
                differ.append(f"{key[0]} {key[1]}: {a[key]} / {b[key]}")
    lines += [
        f"Plans ({', '.join(PLAN_FIELDS)}) of every remat entry: {same} the same, "
        f"{len(differ)} different.",
        "",
    ]
    lines += [f"- {d}" for d in differ]
    if len(pairs) > 1:
        # Op-level choices follow measured times: how often two runs of one tree differ.
        for side, label in ((0, names[0]), (1, names[1])):
            first, second = _plans(pairs[0][side]), _plans(pairs[1][side])
            apart = sum(first[k] != second[k] for k in first.keys() & second.keys())
            lines.append(
                f"- between {label}'s own first two runs: {apart} of "
                f"{len(first.keys() & second.keys())} different"
            )
    lines += _per_model(
        "remat's step / HF checkpointing's, at HF's step peak:",
        pairs,
        list(pairs[0][0]["decoders"]),
        lambda run, model: f"{_ratio(run, model):.3f}",
    )
    lines += _per_model(
        "First step / later step (op level, median over fresh handles):",
        pairs,
        list(pairs[0][0]["first_steps"]),
        lambda run, model: f"{_first(run, model):.2f}",
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pair", nargs=2, action="append", required=True, metavar=("OLD", "NEW"))
    parser.add_argument("--names", nargs=2, default=("old", "new"))
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    pairs = [(_load(old), _load(new)) for old, new in args.pair]
    text = report(pairs, list(args.names))
    pathlib.Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
