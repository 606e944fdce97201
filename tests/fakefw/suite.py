"""A suite of small workloads on top of fakefw, written as a modelci user would write one."""

SUITE = '''\
import modelci
import fakefw


class _Linear(modelci.Workload):
    """A tiny linear model trained by gradient descent on data made from the seed."""

    framework = "python"
    domain = "tabular"
    requires = ["fakefw"]
    steps = 12
    repeats = 5

    def setup(self, ctx):
        rng = ctx.rng()
        self.w = [[rng.uniform(-0.5, 0.5) for _ in range(4)] for _ in range(3)]
        self.x = [[rng.uniform(-1, 1) for _ in range(4)] for _ in range(16)]
        self.y = [[sum(row) * 0.3, row[0] - row[1], row[2] * 0.5] for row in self.x]

    def forward(self, x):
        return fakefw.activation(fakefw.dense(self.w, x))

    def train_step(self, ctx, step):
        grads = [[0.0] * 4 for _ in range(3)]
        loss = 0.0
        for x, y in zip(self.x, self.y):
            out = self.forward(x)
            for i in range(3):
                err = out[i] - y[i]
                loss += err * err
                d = 2 * err * (1 - out[i] ** 2)
                for j in range(4):
                    grads[i][j] += d * x[j] / len(self.x)
        self.update(grads)
        return loss / len(self.x)

    def update(self, grads):
        self.w = [[w - 0.5 * g for w, g in zip(wr, gr)] for wr, gr in zip(self.w, grads)]

    def infer(self, ctx):
        return {"prediction": [self.forward(x) for x in self.x]}


class Stable(_Linear):
    """Touches nothing that 1.1 changes: must stay ok."""


class Precision(_Linear):
    """Its output goes through fakefw.output_scale, which 1.1 changes by 1e-3 relative."""

    def infer(self, ctx):
        return {"prediction": [self.forward(x) for x in self.x],
                "scaled": [fakefw.output_scale(self.forward(x)) for x in self.x]}


class Slow(_Linear):
    """Its inference calls fakefw.heavy_kernel, which 1.1 makes twice as slow."""

    repeats = 9

    def infer(self, ctx):
        fakefw.heavy_kernel(30000)
        return {"prediction": [self.forward(x) for x in self.x]}


class Raises(_Linear):
    """Its inference calls fakefw.validate, which raises in 1.1."""

    def infer(self, ctx):
        return {"prediction": [fakefw.validate(self.forward(x)) for x in self.x]}


class Aborts(_Linear):
    """Its update calls fakefw.fused_update, which aborts the process in 1.1."""

    def update(self, grads):
        self.w = fakefw.fused_update(self.w, grads, 0.5)


class Hangs(_Linear):
    """Its setup calls fakefw.sync_barrier, which never returns in 1.1."""

    def setup(self, ctx):
        fakefw.sync_barrier()
        super().setup(ctx)
'''
