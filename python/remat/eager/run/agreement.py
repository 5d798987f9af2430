"""Whether the handle plans alone or with the other ranks of a process group, in one object.

Alone, a step's plan is kept under its own key. In a process group, every rank's key is agreed
on at each step: each rank looks up, measures and plans in the same steps (or one would wait
alone in an agreement), and all follow the plan made for that combination of keys.
"""

from __future__ import annotations

from typing import Any

from ... import _distributed


class Agreement:
    """The ranks that plan together (`plan_group`, see remat._distributed), or this rank alone."""

    def __init__(self, plan_group: Any) -> None:
        self.group = plan_group
        _distributed.active(plan_group)  # checks its value
        self._numbers: dict[Any, int] = {}  # this rank's number for each key

    @property
    def together(self) -> bool:
        """Whether ranks plan together now (a group is initialized and wider than this rank)."""
        return _distributed.active(self.group)

    def plan_key(self, key: Any, known: bool) -> tuple[Any, bool]:
        """What a step's plan is kept under, and whether every rank has profiled its inputs
        (`known`: this rank has). Together, a collective every rank makes at the same step."""
        if not self.together:
            return key, False
        number = self._numbers.setdefault(key, len(self._numbers))
        numbers, every_rank_knows = _distributed.step_inputs(number, known, self.group)
        return ("ranks", numbers), every_rank_knows
