"""What the zoo:jax workloads share: the model (a pure function and its parameters), Adam, and one jitted step.

A helper module of the suite, not a workload file (its name starts with `_`): the workload files import it as
`from _common import JaxWorkload, Model`. Each workload file keeps its own network, data and loss. Everything
is plain JAX (jax.numpy, jax.lax, jax.grad): no flax or optax, so the environment holds jax and its own
dependencies only.

Data and initial weights are drawn with numpy's generator from the seed (`rng`), and the data stays in numpy
arrays that the compiled functions take as they are: each eager jax operation of a new shape compiles a kernel,
and building the data and weights with jax.random and jax.numpy took 36-107 s of `setup` per model on a 2-core
machine at load average 17. Only the training step and the model are compiled, once each.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from modelci import Context, Workload


class Model:
    """A network as JAX writes one: `apply(params, *inputs)` is pure, `params` a pytree of arrays. Calling the
    model runs the jitted `apply` on the current parameters (what the jax helper saves, loads and exports)."""

    def __init__(self, apply: Callable[..., Any], params: Any) -> None:
        self.apply = apply
        self.params = params
        self._compiled = jax.jit(apply)

    def __call__(self, *inputs: Any) -> Any:
        return self._compiled(self.params, *inputs)


def rng(seed: int, stream: int) -> np.random.Generator:
    """numpy's generator for one `stream` of a workload (0: training data, 1: weights, 2: test inputs)."""
    return np.random.default_rng([seed, stream])


def normal(generator: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> jax.Array:
    """A float32 jax array of normal draws times `scale`."""
    return jnp.asarray((generator.standard_normal(shape) * scale).astype(np.float32))


def dense(generator: np.random.Generator, fan_in: int, fan_out: int) -> dict[str, jax.Array]:
    """A dense layer's weights, LeCun-normal, and zero bias."""
    return {"w": normal(generator, (fan_in, fan_out), 1 / np.sqrt(fan_in)), "b": filled((fan_out,), 0.0)}


def filled(shape: tuple[int, ...], value: float) -> jax.Array:
    """A float32 jax array of one value, made by numpy (jnp.zeros would compile a kernel per shape)."""
    return jnp.asarray(np.full(shape, value, np.float32))


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy of integer `labels` under `logits` (classes on the last axis)."""
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(log_probs, labels[..., None], axis=-1))


def adam_init(params: Any) -> dict[str, Any]:
    """Adam's state for `params`: zero first and second moments, step 0."""
    zeros = jax.tree_util.tree_map(lambda p: jnp.asarray(np.zeros(p.shape, p.dtype)), params)
    return {"m": zeros, "v": zeros, "t": jnp.asarray(np.int32(0))}


def adam_update(params: Any, grads: Any, state: dict[str, Any], lr: float,
                betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> tuple[Any, dict[str, Any]]:
    """One Adam step (Kingma and Ba, with bias correction) over every leaf of `params`."""
    b1, b2 = betas
    t = state["t"] + 1
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
    scale = lr * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    params = jax.tree_util.tree_map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, m, v)
    return params, {"m": m, "v": v, "t": t}


class JaxWorkload(Workload):
    """A zoo:jax workload. A subclass builds `self.model` (a `Model`) and its data in `setup` from `ctx.seed`
    (through `rng`),
    defines `loss(params, *batch)`, `batch(step)` (the arrays of one training step), `example_inputs()` (what
    `infer` feeds the model, which jax_export traces with) and `build_model()` (a freshly initialised model),
    and calls `start_training()` at the end of `setup`."""

    framework = "jax"
    requires = ["jax>=0.4.30"]
    formats = ("jax_params", "jax_export")
    learning_rate = 1e-2

    def loss(self, params: Any, *batch: Any) -> jax.Array:
        raise NotImplementedError

    def batch(self, step: int) -> tuple[Any, ...]:
        raise NotImplementedError

    def example_inputs(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def start_training(self) -> None:
        """Compile the training step (loss, gradients and Adam in one XLA program) and zero Adam's state."""
        lr = self.learning_rate

        def step(params: Any, state: dict[str, Any], *batch: Any) -> tuple[Any, dict[str, Any], jax.Array]:
            loss, grads = jax.value_and_grad(self.loss)(params, *batch)
            params, state = adam_update(params, grads, state, lr)
            return params, state, loss

        self._step = jax.jit(step)
        self.opt_state = adam_init(self.model.params)

    def train_step(self, ctx: Context, step: int) -> float:
        """One Adam step on `batch(step)`; the loss as a float (which waits for the step to finish)."""
        self.model.params, self.opt_state, loss = self._step(self.model.params, self.opt_state, *self.batch(step))
        return float(loss)

    def predict(self) -> np.ndarray:
        """The model's output on `example_inputs()`, as a numpy array (which waits for the computation)."""
        return np.asarray(self.model(*self.example_inputs()))
