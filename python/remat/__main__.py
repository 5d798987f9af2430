"""python -m remat pareto --plot FILE [INSTANCE]: the trade-off curve of one instance as a picture.

INSTANCE is the JSON format of `remat solve` (standard input when omitted or "-")."""

from __future__ import annotations

import argparse
import json
import sys

from ._solve import pareto
from .plot import plot_pareto


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m remat", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    curve = commands.add_parser("pareto", help="plot the exact trade-off curve")
    curve.add_argument("--plot", required=True, help="output image (.png, .svg, .pdf)")
    curve.add_argument("--scale", type=float, default=10000)
    curve.add_argument("--title")
    curve.add_argument("instance", nargs="?", default="-")
    args = parser.parse_args(argv)
    try:
        text = sys.stdin.read() if args.instance == "-" else open(args.instance).read()
        data = json.loads(text)
        memory, runtime, budget = data["memory"], data["runtime"], data["max_memory"]
        # The curve runs on to the total memory, so the budget is seen inside it.
        total = sum(m for m in memory if isinstance(m, (int, float)))
        front = pareto(
            memory,
            runtime,
            max(budget, total) if isinstance(budget, (int, float)) else budget,
            scale=args.scale,
        )
        plot_pareto(front, args.plot, budget=budget, title=args.title)
    except (OSError, ValueError, TypeError, KeyError) as error:
        message = f"{error.args[0]}: missing" if isinstance(error, KeyError) else str(error)
        print(f"error: {message}", file=sys.stderr)
        return 2
    print(json.dumps({"plot": args.plot, "breakpoints": len(front.budgets)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
