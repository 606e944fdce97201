"""What the zoo:torch workloads share: their declarations, one optimizer step, and inference without gradients.

A helper module of the suite, not a workload file (its name starts with `_`): the workload files import it as
`from _common import TorchWorkload`. Each workload file keeps its own model, data, training step and outputs.
"""

from __future__ import annotations

import torch
from torch import nn

from modelci import Workload


class TorchWorkload(Workload):
    """A zoo:torch workload. A subclass sets `self.model` (the `nn.Module` that `infer` calls) and
    `self.optimizer` in `setup`, and defines `build_model()` (a freshly initialised network on the workload's
    device, which the torch helper loads a state_dict into) and `example_inputs()` (what `infer` feeds the
    model, which torchscript tracing and torch.export use too)."""

    framework = "torch"
    requires = ["torch>=2.0"]
    formats = ("state_dict", "torchscript", "torch_export")

    def optimize(self, loss: torch.Tensor, clip_norm: float | None = None) -> float:
        """One step of `self.optimizer` on `loss`: zero the gradients, backpropagate, clip the gradient norm of
        the model's parameters to `clip_norm` when given, step; returns the loss as a float."""
        self.optimizer.zero_grad()
        loss.backward()
        if clip_norm is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), clip_norm)
        self.optimizer.step()
        return loss.item()

    def predict(self):
        """The model's output on `example_inputs()`, in eval mode and without gradients."""
        self.model.eval()
        with torch.no_grad():
            return self.model(*self.example_inputs())
