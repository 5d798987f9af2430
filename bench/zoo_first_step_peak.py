"""auto_checkpoint's first step on zoo models: its high-water mark against a later step's, and
whether its gradients equal plain training's (torch.equal), at the least and a middle budget.

    python bench/zoo_first_step_peak.py llama t5 vit convnext

High-water mark: MemTracker's activations and temporaries at the step's peak (bench/eager_ops.py).
"""

from __future__ import annotations

import copy
import pathlib
import sys
import warnings

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.append(str(ROOT / "bench"))

from eager_ops import peak_of  # noqa: E402
from zoo import adopt  # noqa: E402
from zoo.models import ZOO  # noqa: E402
from zoo.training import pair  # noqa: E402


def main(names: list[str]) -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    for name in names:
        zoo = ZOO[name]
        args, kwargs = zoo.batch()
        model, plain = pair(zoo, zoo.attention[0])
        measured = adopt.measure(zoo, copy.deepcopy(model))
        least, most = measured.least_activation_budget_bytes, measured.no_checkpoint_bytes
        for label, budget in (("least", least), ("middle", (least + most) // 2)):
            wrapped, reference = copy.deepcopy(model), copy.deepcopy(plain)
            adopt.enable(zoo, wrapped, budget)

            def step() -> None:
                zoo.loss(wrapped(*args, **kwargs)).backward()

            torch.manual_seed(0)
            first = peak_of(step, wrapped, "cpu")
            torch.manual_seed(0)
            zoo.loss(reference(*args, **kwargs)).backward()
            equal = all(
                torch.equal(a.grad, b.grad)
                for a, b in zip(reference.parameters(), wrapped.parameters())
                if a.grad is not None
            )
            later = peak_of(step, wrapped, "cpu")
            print(
                f"{name} {label}: first step {first / 2**20:.2f} MiB, later {later / 2**20:.2f} "
                f"MiB, first step's gradients equal plain: {equal}"
            )


if __name__ == "__main__":
    main(sys.argv[1:] or list(ZOO))
