"""python -m remat: the trade-off curve of an instance as a picture, or a step's estimate.

python -m remat pareto --plot FILE [INSTANCE]: the trade-off curve of one instance as a picture.

INSTANCE is the JSON format of `remat solve` (standard input when omitted or "-"). The curve runs
on to the instance's total memory, so that its budget is seen inside it. Exit 2: bad input or an
image that cannot be written; exit 3: the time limit or the planner-memory cap was reached (as
`remat pareto`, which runs this for --plot and passes its limits on)."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

from . import estimate_command
from ._core import PlannerMemoryError, WorkLimitError, __version__
from ._solve import pareto
from .units import parse_bytes


class _PlotError(Exception):
    """A reason the image cannot be written, stated for the user."""


def _check_image_path(image: str) -> None:
    """Refuses, before any work, a format matplotlib cannot write or a folder that is not there."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise _PlotError(f"plot: needs matplotlib ({error}); pip install matplotlib") from None
    formats = sorted(Figure().canvas.get_supported_filetypes())
    suffix = pathlib.Path(image).suffix.lower().lstrip(".")
    if suffix not in formats:
        problem = f"unsupported image format '.{suffix}'" if suffix else "no image extension"
        choices = ", ".join("." + f for f in formats)
        raise _PlotError(f"plot: cannot write {image!r}: {problem} (use one of {choices})")
    folder = pathlib.Path(image).parent
    if not folder.exists():
        raise _PlotError(f"plot: cannot write {image!r}: no folder {str(folder)!r}")
    if not folder.is_dir():
        raise _PlotError(f"plot: cannot write {image!r}: {str(folder)!r} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _PlotError(f"plot: cannot write {image!r}: folder {str(folder)!r} is not writable")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m remat", description=__doc__.splitlines()[0])
    # As `remat --version` prints it: the package and the binary carry one version.
    parser.add_argument("--version", action="version", version=f"remat {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    curve = commands.add_parser("pareto", help="plot the exact trade-off curve")
    curve.add_argument("--plot", required=True, help="output image (.png, .svg, .pdf)")
    curve.add_argument("--scale", type=float, default=10000)
    curve.add_argument("--title")
    curve.add_argument("--time-limit", type=float, help="seconds (exit 3 past them)")
    curve.add_argument("--max-planner-bytes", help="cap on the solver's memory, e.g. 8GiB")
    curve.add_argument("instance", nargs="?", default="-")
    estimate_command.add_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "estimate":
        return estimate_command.run(args)
    try:
        _check_image_path(args.plot)
        text = sys.stdin.read() if args.instance == "-" else open(args.instance).read()
        data = json.loads(text)
        memory, runtime, budget = data["memory"], data["runtime"], data["max_memory"]
        # The curve runs on to the total memory, so the budget is seen inside it.
        total = sum(m for m in memory if isinstance(m, (int, float)))
        limit = max(budget, total) if isinstance(budget, (int, float)) else budget
        cap = None
        if args.max_planner_bytes is not None:
            cap = parse_bytes(args.max_planner_bytes, "max_planner_bytes")
        front = pareto(
            memory,
            runtime,
            limit,
            scale=args.scale,
            time_limit=args.time_limit,
            max_planner_bytes=cap,
        )
        from .plot import plot_pareto

        try:
            plot_pareto(front, args.plot, budget=budget, title=args.title)
        except OSError as error:
            raise _PlotError(
                f"plot: cannot write {args.plot!r}: {error.strerror or error}"
            ) from None
    except (WorkLimitError, PlannerMemoryError) as error:  # a limit, not bad input
        print(f"error: {error}", file=sys.stderr)
        return 3
    except (_PlotError, OSError, ValueError, TypeError, KeyError) as error:
        message = f"{error.args[0]}: missing" if isinstance(error, KeyError) else str(error)
        print(f"error: {message}", file=sys.stderr)
        return 2
    print(json.dumps({"plot": args.plot, "breakpoints": len(front.budgets)}, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
