"""One-line adoption for model libraries: each module finds its library's blocks the way the
library's own checkpointing does, refuses to stack on that checkpointing, and hands the blocks to
:func:`remat.torch.auto_checkpoint`.

    import remat.integrations.transformers
    handle = remat.integrations.transformers.enable(model, memory_budget="8GiB")

    import remat.integrations.timm
    handle = remat.integrations.timm.enable(model, memory_budget="8GiB")

Importing one never imports its library; it is looked at only through the model given.
"""

from . import timm, transformers  # noqa: F401  (reachable as remat.integrations.timm after import)
