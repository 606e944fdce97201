"""What the zoo:paddle workloads share: their declarations, the device, one optimizer step, and inference without
gradients.

A helper module of the suite, not a workload file (its name starts with `_`): the workload files import it as
`from _common import PaddleWorkload, use_device`. Each workload file keeps its own model, data, training step and
outputs.
"""

from __future__ import annotations

import paddle

from modelci import Workload


def use_device(device: str) -> None:
    """Point paddle at the harness's device ("cpu", "cuda", "cuda:1" -> paddle's "gpu:1")."""
    paddle.set_device("cpu" if device == "cpu" else device.replace("cuda", "gpu"))


class PaddleWorkload(Workload):
    """A zoo:paddle workload. A subclass sets `self.model` (the `paddle.nn.Layer` that `infer` calls) and
    `self.optimizer` in `setup`, and defines `build_model()` (a freshly initialised network, which the paddle
    helper loads a state dict into) and `example_inputs()` (what `infer` feeds the model, which the paddle_jit
    format builds its InputSpec from)."""

    framework = "paddle"
    requires = ["paddlepaddle>=2.6"]
    formats = ("paddle_state", "paddle_jit")

    def optimize(self, loss: paddle.Tensor) -> float:
        """One step of `self.optimizer` on `loss`: backpropagate, step, clear the gradients; returns the loss as
        a float."""
        loss.backward()
        self.optimizer.step()
        self.optimizer.clear_grad()
        return float(loss)

    def predict(self):
        """The model's output on `example_inputs()`, in eval mode and without gradients."""
        self.model.eval()
        with paddle.no_grad():
            return self.model(*self.example_inputs())
