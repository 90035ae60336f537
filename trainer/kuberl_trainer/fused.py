"""Whole gradient steps for small MLPs on CPU, by hand: PPO's (tanh actor
and critic) and DQN's (ReLU Q network).

On two 64x64 MLPs and 256 samples the arithmetic of a PPO step takes well
under 0.3 ms; autograd, `nn.Module` calls, the optimiser's per-parameter
loops and fresh tensors for every intermediate take several times that.
These steps compute the very same update in a few dozen tensor operations:

- every parameter is a view into ONE flat tensor (the modules' parameters
  are rebound to those views, so the modules, `fastpolicy`'s numpy views,
  state dicts and checkpoints see the same memory), so clipping and Adam are
  a handful of operations on one vector, and a data-parallel gradient
  average is one all-reduce of one vector (`FlatAdam`);
- the loss's gradient at the network's outputs is written in closed form,
  then back-propagated by hand (no autograd graph);
- PPO's actor and critic share each hidden layer's matmul (their weights
  stacked as (2, out, in): one `baddbmm` for both heads);
- intermediates live in buffers allocated once per minibatch size.

What they compute equals the nn.Module path (`ppo.ppo_loss` / `dqn.dqn_loss`
+ autograd + `clip_grad_norm_` + `torch.optim.Adam`) on the same weights up
to float rounding (tests/unit/test_trainer_fused.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from .ppo_terms import LOG_SQRT_2PI, STAT_NAMES, minibatch_columns


def supports(agent: nn.Module, device: torch.device, precision: str = "fp32") -> bool:
    """Separate tanh-MLP actor and critic of equal hidden widths on CPU in fp32."""
    encoder = getattr(agent, "encoder", None)
    actor, critic = list(getattr(agent, "actor", [])), list(getattr(agent, "critic", []))
    if device.type != "cpu" or precision != "fp32" or not (encoder is None or isinstance(encoder, nn.Identity)):
        return False
    if not all(isinstance(m, (nn.Linear, nn.Tanh)) for m in actor + critic) or len(actor) != len(critic):
        return False
    linear_a = [m for m in actor if isinstance(m, nn.Linear)]
    linear_c = [m for m in critic if isinstance(m, nn.Linear)]
    tanh_after_each_hidden = all(isinstance(m, nn.Tanh) for m in actor[1:-1:2] + critic[1:-1:2])
    same_hidden = [m.weight.shape for m in linear_a[:-1]] == [m.weight.shape for m in linear_c[:-1]]
    return len(linear_a) >= 2 and tanh_after_each_hidden and same_hidden and linear_c[-1].out_features == 1


class AdamState:
    """torch.optim.Adam's bookkeeping without torch.optim, for the fused steps (which do
    Adam's arithmetic themselves, FlatAdam): one param group with Adam's defaults (fused,
    as on CPU), the per-parameter state, and the very same `state_dict` format, so a
    checkpoint written by either loads into the other. Why not the real one: the first
    torch optimiser a process builds imports torch._dynamo (`add_param_group` is
    dynamo-disabled), 0.87 s here, a quarter of a CartPole solve, and again at the
    first checkpoint's `state_dict()` of a process that had not paid it yet."""

    def __init__(self, params, lr: float, eps: float = 1e-8, betas: tuple[float, float] = (0.9, 0.999)):
        self.param_groups = [{"params": list(params), "lr": lr, "betas": betas, "eps": eps, "weight_decay": 0,
                              "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
                              "differentiable": False, "fused": True, "decoupled_weight_decay": False}]
        self.state: dict[nn.Parameter, dict] = {}

    def state_dict(self) -> dict:
        """As torch.optim.Optimizer.state_dict: parameters by index, the state's tensors themselves."""
        params = self.param_groups[0]["params"]
        index = {id(p): i for i, p in enumerate(params)}
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        return {"state": {index[id(p)]: entry for p, entry in self.state.items()},
                "param_groups": [{**group, "params": list(range(len(params)))}]}

    def load_state_dict(self, saved: dict) -> None:
        """As torch.optim.Adam.load_state_dict with fused=True: the saved group's settings, each
        state tensor cast to its parameter's dtype and device (the step count to float32)."""
        params = self.param_groups[0]["params"]
        groups = saved["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(params):
            raise ValueError("loaded optimizer state does not match this network: "
                             f"{[len(g['params']) for g in groups]} parameters in groups, expected [{len(params)}]")
        by_saved_id = dict(zip(groups[0]["params"], params, strict=True))
        state = {}
        for key, entry in saved["state"].items():
            param = by_saved_id.get(key)
            shapes = {name: tuple(value.shape) for name, value in entry.items() if isinstance(value, torch.Tensor)}
            if param is None or shapes != {"step": (), "exp_avg": tuple(param.shape), "exp_avg_sq": tuple(param.shape)}:
                raise ValueError(f"loaded optimizer state for parameter {key!r} is not Adam's for this network (got {shapes})")
            state[param] = {name: value.to(dtype=torch.float32 if name == "step" else param.dtype, device=param.device)
                            for name, value in entry.items()}
        self.state = state
        self.param_groups = [{**groups[0], "params": params}]


def flush_subnormals() -> None:
    """This thread's float arithmetic treats subnormals (below 2**-126) as zero
    (FTZ/DAZ). Why: Adam's moments of a parameter whose gradient stays 0 (a
    dead ReLU unit) decay into subnormals and stay there, as 0.9 times the
    smallest of them rounds back to itself; by a DQN CartPole solve most of
    the hidden layer's moments are such, and every op over them costs
    several times its normal price (a whole solve: 125 against 67 s). A
    subnormal moment moves no weight (its step, below 1e-30, vanishes in any
    weight's rounding): the weights after whole solves were the same bits
    with and without it (tests/unit/test_trainer_fused.py checks a case)."""
    torch.set_flush_denormal(True)


def tanh_(tensor: torch.Tensor) -> torch.Tensor:
    """tanh in place, by numpy on the same memory (a contiguous CPU float
    tensor): torch 2.13's CPU tanh takes 67 us for PPO's 2 x 256 x 64 hidden
    activations, numpy's 6.5 us, within an ulp of it."""
    array = tensor.numpy()
    np.tanh(array, out=array)
    return tensor


def divide_in_place(values: torch.Tensor, divisor: int) -> torch.Tensor:
    """values / divisor, as DDP's div_ divides a gradient by the world size, bit for bit. A power
    of two is a multiply by its reciprocal: x * 2^-k and x / 2^k are the same real number, correctly
    rounded either way (subnormals too), at a multiply's cost (DQN's 67,586 floats: 8 us, not 19)."""
    if divisor & (divisor - 1) == 0:
        return values.mul_(1.0 / divisor)
    return values.div_(divisor)


class FlatAdam:
    """Parameters as views of ONE flat vector (the modules' parameters are
    rebound to them, so modules, numpy views, state dicts and checkpoints see
    the same memory), with the data-parallel gradient average, clip_grad_norm_'s
    rule and `optimizer`'s Adam (its param group's lr, betas and eps, read at
    every step, so annealing applies) each a few operations on that vector.
    The optimizer's per-parameter state is kept live as views of the flat
    moments, so its `state_dict()` (checkpoints) is always current; after
    `optimizer.load_state_dict` call `adopt_optimizer_state`. `allreduce`,
    when given, sums a tensor over ranks in place (the gradient is divided by
    `world_size` first, as DDP's default hook does)."""

    def __init__(self, shapes: list[tuple[str, tuple[int, ...]]], optimizer: AdamState | torch.optim.Adam,
                 allreduce: Callable[[torch.Tensor], None] | None, world_size: int):
        group = optimizer.param_groups[0]
        if len(optimizer.param_groups) != 1 or group["weight_decay"] or group["amsgrad"] or group["maximize"]:
            raise ValueError(f"{type(self).__name__} applies plain Adam: one param group, no weight decay, amsgrad or maximize")
        self.optimizer, self.allreduce, self.world_size = optimizer, allreduce, world_size
        size = sum(math.prod(s) for _, s in shapes)
        self.flat = torch.zeros(size)
        self.grad = torch.zeros(size)
        self.exp_avg = torch.zeros(size)
        self.exp_avg_sq = torch.zeros(size)
        self.view: dict[str, torch.Tensor] = {}
        self.grad_view: dict[str, torch.Tensor] = {}
        offset = 0
        for name, shape in shapes:
            n = math.prod(shape)
            self.view[name] = self.flat[offset : offset + n].view(shape)
            self.grad_view[name] = self.grad[offset : offset + n].view(shape)
            offset += n

    def bind(self, views: dict[nn.Parameter, torch.Tensor]) -> None:
        """Copy each parameter into its view of `flat`, then make it that view."""
        if {id(p) for p in views} != {id(p) for p in self.optimizer.param_groups[0]["params"]}:
            raise ValueError(f"{type(self).__name__}: the optimizer must hold exactly the network's parameters")
        with torch.no_grad():
            for param, view in views.items():
                view.copy_(param)
                param.data = view
        self.views = views
        # Adam's step count per parameter, as torch keeps it (one float tensor each), advanced by one op
        self.step_counts = torch.zeros(len(views))
        self.kernel_steps = [self.step_counts[0]]  # what Adam's kernel reads as the step (all counts are equal)
        self.adopt_optimizer_state()

    def adopt_optimizer_state(self) -> None:
        """Take the optimizer's Adam state (after load_state_dict) into the
        flat moments, then make its state entries views of them again."""
        for i, param in enumerate(self.optimizer.param_groups[0]["params"]):
            state = self.optimizer.state.get(param)
            exp_avg, exp_avg_sq = self._slot(self.exp_avg, param), self._slot(self.exp_avg_sq, param)
            if state:
                exp_avg.copy_(state["exp_avg"])
                exp_avg_sq.copy_(state["exp_avg_sq"])
                self.step_counts[i] = float(state["step"])
            else:
                exp_avg.zero_()
                exp_avg_sq.zero_()
                self.step_counts[i] = 0.0
            self.optimizer.state[param] = {"step": self.step_counts[i], "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        if not bool((self.step_counts == self.step_counts[0]).all()):
            raise ValueError(f"{type(self).__name__}: parameters with different Adam step counts {self.step_counts.tolist()}")
        self.steps = int(self.step_counts[0])

    def load_optimizer(self, state: dict) -> None:
        """A checkpoint's optimizer state (either optimizer's state_dict format), taken into the flat moments."""
        self.optimizer.load_state_dict(state)
        self.adopt_optimizer_state()

    def _slot(self, flat: torch.Tensor, param: nn.Parameter) -> torch.Tensor:
        """The part of a flat vector laid out like `flat` that holds `param`."""
        view = self.views[param]
        return flat.as_strided(view.shape, view.stride(), view.storage_offset())

    def apply_gradient(self, max_norm: float) -> None:
        """Average over ranks, clip, Adam: all on the one flat vector."""
        if self.allreduce is not None:
            divide_in_place(self.grad, self.world_size)
            self.allreduce(self.grad)
        self.clip(max_norm)
        self.adam()

    def clip(self, max_norm: float) -> None:
        """clip_grad_norm_'s rule: the scale max_norm / (norm + 1e-6), at most 1, in float32
        as torch computes it on a 0-d tensor (a reciprocal, then a product), here on numpy
        scalars (the vector is on the CPU: .item() waits for nothing); no multiply by 1.0."""
        norm = np.float32(torch.linalg.vector_norm(self.grad).item())
        scale = np.float32(max_norm) * (np.float32(1.0) / (norm + np.float32(1e-6)))
        if not scale >= 1.0:  # a NaN scale still multiplies, as torch's did
            self.grad.mul_(float(scale))

    def adam(self) -> None:
        """torch.optim.Adam(fused=True)'s update (no weight decay, no amsgrad) on the flat
        vector, through the very kernel it calls, so the bits are its bits (a test holds them
        equal). Why not through torch.optim.adam.adam(fused=True), the public function: its
        Python costs ~30 us a call, more than PPO's whole update. One pass over the four
        vectors: 0.06 ms for DQN's 67,586 floats against 0.12 for the six ops it replaced."""
        group = self.optimizer.param_groups[0]
        (beta1, beta2), lr, eps = group["betas"], group["lr"], group["eps"]
        self.steps += 1
        self.step_counts.add_(1)
        torch._fused_adam_([self.flat], [self.grad], [self.exp_avg], [self.exp_avg_sq], [], self.kernel_steps,
                           lr=lr, beta1=beta1, beta2=beta2, weight_decay=0.0, eps=eps, amsgrad=False, maximize=False)


class FusedPPOStep(FlatAdam):
    """PPO's minibatch step for `agent` (a `ppo.Agent` that `supports`),
    applying `optimizer`'s Adam with global-norm clipping (see FlatAdam)."""

    def __init__(self, agent: nn.Module, hp, optimizer: AdamState | torch.optim.Adam,
                 allreduce: Callable[[torch.Tensor], None] | None = None, world_size: int = 1):
        if not supports(agent, torch.device("cpu")):
            raise ValueError("FusedPPOStep needs separate tanh MLP heads of equal hidden widths on CPU in fp32")
        self.agent, self.hp = agent, hp
        self.discrete = agent.discrete
        actor = [m for m in agent.actor if isinstance(m, nn.Linear)]
        critic = [m for m in agent.critic if isinstance(m, nn.Linear)]
        # layout: per hidden layer [actor W, critic W] then [actor b, critic b]; then the heads; then log_std
        shapes: list[tuple[str, tuple[int, ...]]] = []
        for k, (a, c) in enumerate(zip(actor[:-1], critic[:-1], strict=True)):
            shapes += [(f"W{k}", (2, *a.weight.shape)), (f"b{k}", (2, a.out_features))]
        head_a, head_c = actor[-1], critic[-1]
        shapes += [("Wa", tuple(head_a.weight.shape)), ("ba", (head_a.out_features,)),
                   ("Wc", tuple(head_c.weight.shape)), ("bc", (1,))]
        if not self.discrete:
            shapes.append(("log_std", tuple(agent.log_std.shape)))
        super().__init__(shapes, optimizer, allreduce, world_size)
        self.hidden = len(actor) - 1
        views: dict[nn.Parameter, torch.Tensor] = {}
        for k, (a, c) in enumerate(zip(actor[:-1], critic[:-1], strict=True)):
            views |= {a.weight: self.view[f"W{k}"][0], c.weight: self.view[f"W{k}"][1],
                      a.bias: self.view[f"b{k}"][0], c.bias: self.view[f"b{k}"][1]}
        views |= {head_a.weight: self.view["Wa"], head_a.bias: self.view["ba"],
                  head_c.weight: self.view["Wc"], head_c.bias: self.view["bc"]}
        if not self.discrete:
            views[agent.log_std] = self.view["log_std"]
        self.bind(views)
        self.buffers: dict[int, dict[str, torch.Tensor]] = {}

    def _buffers(self, batch: int, obs_dim: int) -> dict[str, torch.Tensor]:
        found = self.buffers.get(batch)
        if found is None:
            widths = [self.view[f"W{k}"].shape[1] for k in range(self.hidden)]
            n_out = self.view["Wa"].shape[0]
            found = {f"h{k}": torch.zeros(2, batch, w) for k, w in enumerate(widths)}
            found |= {f"dz{k}": torch.zeros(2, batch, w) for k, w in enumerate(widths)}
            found |= {
                "out": torch.zeros(batch, n_out), "value": torch.zeros(batch, 1),
                "d_out": torch.zeros(batch, n_out), "d_value": torch.zeros(batch, 1),
                "columns": torch.zeros(batch, len(STAT_NAMES)),
            }
            self.buffers[batch] = found
        return found

    # -- the step ---------------------------------------------------------------

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(actor output (B, A), value (B, 1)) into preallocated buffers."""
        buf, view = self._buffers(obs.shape[0], obs.shape[1]), self.view
        x = obs.expand(2, *obs.shape)
        for k in range(self.hidden):
            h = buf[f"h{k}"]
            torch.baddbmm(view[f"b{k}"].unsqueeze(1), x, view[f"W{k}"].transpose(1, 2), out=h)
            tanh_(h)
            x = h
        torch.addmm(view["ba"], x[0], view["Wa"].t(), out=buf["out"])
        torch.addmm(view["bc"], x[1], view["Wc"].t(), out=buf["value"])
        return buf["out"], buf["value"]

    def step(self, obs: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """One optimiser step on a minibatch, as `PPOTrainer.minibatch_step`
        takes it: obs (B, obs_dim) fp32; rows (B, action columns + 5), the
        last five old log-prob, old value, advantage, return, valid.
        Returns the weighted sums of STAT_NAMES, (5,)."""
        hp = self.hp
        buf = self._buffers(obs.shape[0], obs.shape[1])
        actions, old_log_prob, old_value, advantages, returns, weight = minibatch_columns(rows, hp.norm_advantage)
        out, value2d = self.forward(obs)
        value = value2d.squeeze(1)
        columns = buf["columns"]

        # -- the loss's terms (columns, summed with the weights below) and d/d(log-prob)
        if self.discrete:
            log_p = torch.log_softmax(out, 1)
            p = log_p.exp()
            index = actions.long()
            new_log_prob = log_p.gather(1, index).squeeze(1)
            entropy = torch.sum(p * log_p, 1).neg_()
        else:
            log_std = self.view["log_std"]
            z = (actions - out) / log_std.exp()
            new_log_prob = (-0.5 * z.square() - log_std - LOG_SQRT_2PI).sum(1)
            entropy = (0.5 + LOG_SQRT_2PI + log_std).sum().expand(obs.shape[0])
        log_ratio = new_log_prob - old_log_prob
        ratio = log_ratio.exp()
        unclipped = -advantages * ratio
        clipped = -advantages * ratio.clamp(1 - hp.clip_coef, 1 + hp.clip_coef)
        torch.maximum(unclipped, clipped, out=columns[:, 0])
        error = value - returns
        if hp.clip_value_loss:
            delta = value - old_value
            inside = delta.abs() <= hp.clip_coef
            clipped_error = old_value + delta.clamp(-hp.clip_coef, hp.clip_coef) - returns
            a, b = error.square(), clipped_error.square()
            torch.maximum(a, b, out=columns[:, 1]).mul_(0.5)
            # torch.maximum's gradient: to the larger side, halved on a tie
            d_clipped = clipped_error * inside
            d_value = torch.where(a > b, error, torch.where(a < b, d_clipped, 0.5 * (error + d_clipped)))
        else:
            torch.mul(error.square(), 0.5, out=columns[:, 1])
            d_value = error
        columns[:, 2] = entropy
        torch.sub(ratio, 1, out=columns[:, 3])
        columns[:, 4] = (columns[:, 3].abs() > hp.clip_coef)
        columns[:, 3] -= log_ratio
        stats = weight @ columns

        # -- closed-form gradients at the heads
        # d max(unclipped, clipped)/d ratio: -A where the unclipped side wins or ties (the clamp passes it), else 0
        d_log_prob = (unclipped >= clipped) * (-advantages * weight) * ratio
        d_entropy = weight * -hp.ent_coef
        d_out = buf["d_out"]
        if self.discrete:
            # d logp_a/d logits = onehot - p ; d H/d logits = -p (log p + H)
            coef = torch.addcmul(d_log_prob.unsqueeze(1), log_p + entropy.unsqueeze(1), d_entropy.unsqueeze(1))
            torch.mul(p, coef, out=d_out).neg_()
            d_out.scatter_add_(1, index, d_log_prob.unsqueeze(1))
        else:
            std = log_std.exp()
            torch.mul(z, (d_log_prob.unsqueeze(1) / std), out=d_out)
            torch.sum(z.square().sub_(1).mul_(d_log_prob.unsqueeze(1)), 0, out=self.grad_view["log_std"])
            self.grad_view["log_std"].add_(d_entropy.sum())
        torch.mul(d_value, weight * hp.vf_coef, out=buf["d_value"][:, 0])
        self.backward(obs, buf)
        self.apply_gradient(hp.max_grad_norm)
        return stats

    def backward(self, obs: torch.Tensor, buf: dict[str, torch.Tensor]) -> None:
        view, grad = self.view, self.grad_view
        top = buf[f"h{self.hidden - 1}"]
        d_out, d_value = buf["d_out"], buf["d_value"]
        torch.mm(d_out.t(), top[0], out=grad["Wa"])
        torch.sum(d_out, 0, out=grad["ba"])
        torch.mm(d_value.t(), top[1], out=grad["Wc"])
        torch.sum(d_value, 0, out=grad["bc"])
        dh = buf[f"dz{self.hidden - 1}"]
        torch.mm(d_out, view["Wa"], out=dh[0])
        torch.mm(d_value, view["Wc"], out=dh[1])
        for k in range(self.hidden - 1, -1, -1):
            h, dz = buf[f"h{k}"], buf[f"dz{k}"]
            # tanh' = 1 - tanh^2, in place on the incoming gradient. The layer's output h is squared
            # in place: nothing reads it after this (the layer above took its weight gradient from
            # it already), and a step's buffers that fit the core's L2 cache run faster
            dz.addcmul_(dz, h.mul_(h), value=-1)
            below = obs.expand(2, *obs.shape) if k == 0 else buf[f"h{k - 1}"]
            torch.bmm(dz.transpose(1, 2), below, out=grad[f"W{k}"])
            torch.sum(dz, 1, out=grad[f"b{k}"])
            if k > 0:
                torch.bmm(dz, view[f"W{k}"], out=buf[f"dz{k - 1}"])


# --- DQN ---------------------------------------------------------------------------


relu_backward = torch.ops.aten.threshold_backward.grad_input  # (grad, output, 0.0, grad_input=out)


def supports_q(network: nn.Module, device: torch.device, precision: str = "fp32") -> bool:
    """A ReLU MLP Q network (dqn.QNetwork: Linear, ReLU, ..., Linear) on CPU in fp32."""
    layers = list(getattr(network, "net", []))
    return (
        device.type == "cpu"
        and precision == "fp32"
        and len(layers) >= 3
        and all(isinstance(m, nn.Linear) for m in layers[0::2])
        and all(isinstance(m, nn.ReLU) for m in layers[1::2])
        and isinstance(layers[-1], nn.Linear)
    )


class FusedQStep(FlatAdam):
    """DQN's gradient step (dqn.DQNTrainer.gradient_step: TD targets from the
    target network, double or not, spec.dqn.loss of the taken action's value,
    backward, clipping, Adam) for a ReLU MLP Q network by hand. The online
    network's parameters are views of `flat`; the target's of `target_flat`
    (same layout), so a soft or hard target update is one op."""

    def __init__(self, agent: nn.Module, target: nn.Module, hp, optimizer: AdamState | torch.optim.Adam,
                 allreduce: Callable[[torch.Tensor], None] | None = None, world_size: int = 1):
        if not (supports_q(agent, torch.device("cpu")) and supports_q(target, torch.device("cpu"))):
            raise ValueError("FusedQStep needs ReLU MLP Q networks on CPU in fp32")
        self.hp = hp
        linear = [m for m in agent.net if isinstance(m, nn.Linear)]
        shapes: list[tuple[str, tuple[int, ...]]] = []
        for k, m in enumerate(linear):
            shapes += [(f"W{k}", tuple(m.weight.shape)), (f"b{k}", (m.out_features,))]
        super().__init__(shapes, optimizer, allreduce, world_size)
        self.layers = len(linear)
        self.bind({p: self.view[name] for p, (name, _) in zip(agent.parameters(), shapes, strict=True)})
        self.target_flat = torch.zeros_like(self.flat)
        self.target_view = {name: self.target_flat[v.storage_offset() : v.storage_offset() + v.numel()].view(v.shape)
                            for name, v in self.view.items()}
        with torch.no_grad():
            for p, (name, _) in zip(target.parameters(), shapes, strict=True):
                self.target_view[name].copy_(p)
                p.data = self.target_view[name]
        self.numpy_view = {name: view.numpy() for name, view in self.view.items()}
        # per layer, made once (the step is a few dozen small ops: a view or a name lookup is a real share)
        self.weights = [self.view[f"W{k}"] for k in range(self.layers)]
        self.grad_weights = [self.grad_view[f"W{k}"] for k in range(self.layers)]
        self.grad_biases = [self.grad_view[f"b{k}"] for k in range(self.layers)]
        self.online_layers = [(self.view[f"W{k}"].t(), self.view[f"b{k}"]) for k in range(self.layers)]
        self.target_layers = [(self.target_view[f"W{k}"].t(), self.target_view[f"b{k}"]) for k in range(self.layers)]
        self.buffers: dict[int, dict[str, list[torch.Tensor]]] = {}
        self.target_buffers: dict[int, list[torch.Tensor]] = {}  # target_q's hidden activations, per batch size

    def _buffers(self, batch: int) -> dict[str, list[torch.Tensor]]:
        """Per layer: activations h, their gradients d (and d transposed), the double-DQN chooser's next."""
        found = self.buffers.get(batch)
        if found is None:
            widths = [w.shape[0] for w in self.weights]
            found = {name: [torch.zeros(batch, w) for w in widths] for name in ("h", "d", "next")}
            found["d_t"] = [d.t() for d in found["d"]]
            self.buffers[batch] = found
        return found

    def q_values(self, layers: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor,
                 out: list[torch.Tensor]) -> torch.Tensor:
        """The MLP's forward, layers as (W transposed, b), into `out` (one buffer per layer, activations kept)."""
        last = len(layers) - 1
        for k, (weight_t, bias) in enumerate(layers):
            torch.addmm(bias, x, weight_t, out=out[k])
            if k < last:
                out[k].relu_()
            x = out[k]
        return x

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """argmax of the online network's Q-values, in numpy on views of the
        flat weights (acting one vector step at a time: torch's dispatch
        costs more than these matmuls)."""
        x = obs.reshape(len(obs), -1).astype(np.float32, copy=False)
        for k in range(self.layers):
            x = x @ self.numpy_view[f"W{k}"].T + self.numpy_view[f"b{k}"]
            if k < self.layers - 1:
                np.maximum(x, 0.0, out=x)
        return x.argmax(-1)

    def update_target(self, tau: float) -> None:
        """target <- tau * online + (1 - tau) * target (dqn.soft_update), one op."""
        self.target_flat.lerp_(self.flat, tau)

    def target_q(self, next_obs: torch.Tensor) -> torch.Tensor:
        """The target network's Q-values of next_obs (B, A), a new tensor. The
        hidden activations go to buffers kept per batch size: learn() draws
        8192 rows at once, and fresh 8 MB activations cost their page faults
        every update (14.5 against 11 ms per draw here)."""
        x = next_obs.flatten(1).float()
        hidden = self.target_buffers.get(x.shape[0])
        if hidden is None:
            widths = [self.view[f"W{k}"].shape[0] for k in range(self.layers - 1)]
            hidden = self.target_buffers[x.shape[0]] = [torch.empty(x.shape[0], w) for w in widths]
        for (weight_t, bias), out in zip(self.target_layers[:-1], hidden, strict=True):
            x = torch.addmm(bias, x, weight_t, out=out).relu_()
        weight_t, bias = self.target_layers[-1]
        return torch.addmm(bias, x, weight_t)

    def targets(self, returns: torch.Tensor, discount: torch.Tensor, next_obs: torch.Tensor,
                next_q_target: torch.Tensor | None = None) -> torch.Tensor:
        """TD targets (B,): returns + discount * Q_target(s', a'), a' the argmax of
        the online network's Q-values of next_obs for double DQN, of the target's
        otherwise (dqn.td_targets). next_q_target: target_q(next_obs), when the
        caller has it already. Without double DQN nothing here depends on the
        online weights, so learn() takes a whole draw's targets at once."""
        if next_q_target is None:
            next_q_target = self.target_q(next_obs)
        if self.hp.double_dqn:
            buf = self._buffers(next_obs.shape[0])
            chooser = self.q_values(self.online_layers, next_obs.flatten(1).float(), buf["next"])
        else:
            chooser = next_q_target
        best = next_q_target.gather(1, chooser.argmax(1, keepdim=True)).squeeze(1)
        return torch.addcmul(returns, discount, best)

    def step(self, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor,
             discount: torch.Tensor, next_obs: torch.Tensor, next_q_target: torch.Tensor | None = None) -> torch.Tensor:
        """One optimiser step; inputs as DQNTrainer.gradient_step takes them
        (next_q_target: target_q(next_obs), when the caller has it already).
        Returns the loss (a 0-d tensor)."""
        error = self.step_towards(obs, actions, self.targets(returns, discount, next_obs, next_q_target))
        return td_loss(error, self.hp.loss)

    def step_towards(self, obs: torch.Tensor, actions: torch.Tensor, targets: torch.Tensor,
                     error: torch.Tensor | None = None) -> torch.Tensor:
        """One optimiser step towards the TD targets (B,). Returns the TD error
        Q(s, a) - target (B,), written into `error` when given: the loss is a
        function of it (`td_loss`), which learn() takes once for all its steps."""
        batch = obs.shape[0]
        buf = self._buffers(batch)
        hidden, d, d_t = buf["h"], buf["d"], buf["d_t"]
        obs = obs.flatten(1).float()
        q = self.q_values(self.online_layers, obs, hidden)
        index = actions.long().reshape(-1, 1)
        error = torch.sub(q.gather(1, index).squeeze(1), targets, out=error)
        # the mean loss's derivative: Huber's (beta 1) the error clamped to [-1, 1]; the squared error's twice it
        slope = error.clamp(-1.0, 1.0).div_(batch) if self.hp.loss == "huber" else error.mul(2.0 / batch)
        d[-1].zero_().scatter_(1, index, slope.unsqueeze(1))
        for k in range(self.layers - 1, -1, -1):
            below = obs if k == 0 else hidden[k - 1]
            torch.mm(d_t[k], below, out=self.grad_weights[k])
            torch.sum(d[k], 0, out=self.grad_biases[k])
            if k > 0:
                d_below = d[k - 1]
                torch.mm(d[k], self.weights[k], out=d_below)
                # ReLU's gradient: zero where its output was not positive, in place (torch's own ReLU
                # backward; a multiply by the output's sign made a 64 KB temporary a step, and -0.0
                # where this gives 0.0: equal values, and the same Adam state and weights after)
                relu_backward(d_below, hidden[k - 1], 0.0, grad_input=d_below)
        self.apply_gradient(self.hp.max_grad_norm)
        return error


def td_loss(error: torch.Tensor, kind: str) -> torch.Tensor:
    """dqn.dqn_loss from the TD errors (spec.dqn.loss), the mean over the last axis."""
    return error.square().mean(-1) if kind == "mse" else huber(error)


def huber(error: torch.Tensor) -> torch.Tensor:
    """dqn.dqn_loss from the TD errors: the mean Huber loss (beta 1) over the
    last axis, so errors (steps, B) give each step's loss (steps,)."""
    if error.dim() == 1:
        return nn.functional.smooth_l1_loss(error, torch.zeros_like(error))
    return nn.functional.smooth_l1_loss(error, torch.zeros_like(error), reduction="none").mean(-1)
