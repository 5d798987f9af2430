"""First-step memory on CPU, as the per-block wrapping issue measured it: the RSS high-water
growth of one training step of 16 x (Linear 256->256, Tanh) on a 65536 x 256 float32 input,
plain and through remat's checkpoint_sequential at a 512 MiB budget, first and second step.

    python bench/first_step_rss.py plain|notune|tune

Each mode in a fresh process; /proc/self/clear_refs resets the high-water mark before a step.
"""

import sys
import time

import torch

import remat.torch as rt


def status(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) // 1024
    raise KeyError(field)


def main() -> None:
    torch.manual_seed(0)
    layers = []
    for _ in range(16):
        layers += [torch.nn.Linear(256, 256), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers)
    x = torch.randn(65536, 256)
    mode = sys.argv[1] if len(sys.argv) > 1 else "notune"

    def step() -> None:
        if mode == "plain":
            y = model(x)
        else:
            y = rt.checkpoint_sequential(model, x, activation_budget="512MiB", tune=mode == "tune")
        y.sum().backward()

    model(x[:10]).sum().backward()  # gradients allocated
    for which in ("first", "second"):
        open("/proc/self/clear_refs", "w").write("5")
        base = status("VmRSS")
        start = time.time()
        step()
        print(
            f"{mode} {which} step: RSS growth {status('VmHWM') - base} MiB, "
            f"{time.time() - start:.2f} s"
        )


if __name__ == "__main__":
    main()
