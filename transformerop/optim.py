"""AdamW with decoupled weight decay, through PyTorch's fused multi-tensor kernel
(`torch._fused_adamw_`, the kernel torch.optim.AdamW(fused=True) launches), called directly.

Why not torch.optim.AdamW itself: its first use (the constructor's add_param_group) imports
torch._dynamo for the guard that keeps dynamo out of optimizer code, and that import alone took
4.5 s on the H200 machine -- a third of the start-up of a job that never compiles anything. The
arithmetic is the same kernel with the same arguments, so the two agree to the last bit
(tests/test_optim.py checks that, and checks both against a float64 formula).

What the trainer relies on, as with torch.optim: `param_groups` (lr is a device tensor when the
step is CUDA-graphed: the schedule fills it in place), `state[p]` (step, exp_avg, exp_avg_sq --
allocated up front, so a graph capture sees every tensor it will touch), `step()`,
`zero_grad()`, and a `state_dict()` in torch.optim's layout, so checkpoints load either way.
The trainer's parameter groups (build_optimizer) and learning-rate schedule (lr_at) are here too."""
import math

import torch


class AdamW:
    def __init__(self, groups, lr, betas=(0.9, 0.999), eps=1e-8, external=None):
        """external: {parameter: its state tensors} for parameters stepped elsewhere
        (train.fused_step): their state is kept here for checkpoints, and step() skips them."""
        self.external = external or {}
        self.param_groups = []
        for g in groups:
            params = [p for p in g["params"] if p.requires_grad]
            if len({(p.device, p.dtype) for p in params}) > 1:
                raise ValueError("AdamW: a parameter group mixes devices or dtypes; give each its own group")
            self.param_groups.append({"params": params, "lr": lr, "betas": tuple(betas), "eps": eps,
                                      "weight_decay": g.get("weight_decay", 0.0)})
        # step counts live on the parameter's device as float32, as the fused kernel reads them
        self.state = {p: self.external[p] if p in self.external else
                      {"step": torch.zeros((), dtype=torch.float32, device=p.device),
                       "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                       "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
                      for g in self.param_groups for p in g["params"]}

    @torch.no_grad()
    def step(self) -> None:
        for g in self.param_groups:
            params = [p for p in g["params"] if p.grad is not None and p not in self.external]
            if not params:
                continue
            st = [self.state[p] for p in params]
            steps = [s["step"] for s in st]
            torch._foreach_add_(steps, 1.0)
            beta1, beta2 = g["betas"]
            torch._fused_adamw_(params, [p.grad for p in params], [s["exp_avg"] for s in st],
                                [s["exp_avg_sq"] for s in st], [], steps, lr=g["lr"], beta1=beta1, beta2=beta2,
                                weight_decay=g["weight_decay"], eps=g["eps"], amsgrad=False, maximize=False,
                                grad_scale=None, found_inf=None)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()

    # -- checkpoints: torch.optim's layout (state keyed by parameter index) ----------------------
    def _params(self) -> list:
        return [p for g in self.param_groups for p in g["params"]]

    def state_dict(self) -> dict:
        index = {p: i for i, p in enumerate(self._params())}
        groups, start = [], 0
        for g in self.param_groups:
            lr = g["lr"].item() if torch.is_tensor(g["lr"]) else g["lr"]
            groups.append({"lr": lr, "betas": g["betas"], "eps": g["eps"], "weight_decay": g["weight_decay"],
                           "params": list(range(start, start + len(g["params"])))})
            start += len(g["params"])
        return {"state": {index[p]: dict(s) for p, s in self.state.items()},  # references, as torch.optim's
                "param_groups": groups}

    @torch.no_grad()
    def load_state_dict(self, sd: dict) -> None:
        """Copies into the tensors this optimizer already holds (a captured graph keeps reading
        them); the group's lr stays as it is (the schedule sets it every step)."""
        params = self._params()
        sizes = [len(g["params"]) for g in sd.get("param_groups", [])]
        if sizes != [len(g["params"]) for g in self.param_groups]:
            raise ValueError(f"optimizer state has parameter groups of sizes {sizes}, this model "
                             f"{[len(g['params']) for g in self.param_groups]}")
        for i, p in enumerate(params):
            saved = sd["state"].get(i, sd["state"].get(str(i)))
            if saved is None:  # a parameter that had no step yet: fresh state
                continue
            for k, v in self.state[p].items():
                v.copy_(saved[k].reshape(v.shape).to(v.device, v.dtype))


def lr_at(step: int, t) -> float:
    """Linear warm-up to lr, then cosine decay to min_lr at max_iters."""
    if step < t.warmup_iters:
        return t.lr * (step + 1) / t.warmup_iters
    progress = min(1.0, (step - t.warmup_iters) / max(1, t.max_iters - t.warmup_iters))
    return t.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (t.lr - t.min_lr)


def build_optimizer(model, t, device, masters=None):
    """Weight decay on matrices only (not biases, LayerNorm or embeddings' 1-D params). With
    masters (train.master_weights), AdamW steps their fp32 masters in place of the bf16 weights."""
    params = [p for p in model.parameters() if p.requires_grad]
    if masters is not None:
        params = masters.substituted(params)
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    graphed = bool(t.cuda_graph)  # a captured step reads lr from a device tensor
    lr = torch.tensor(t.lr, device=device) if graphed else t.lr
    return AdamW(groups, lr=lr, betas=(t.beta1, t.beta2), external=masters.moments if masters is not None else None)


def set_lr(opt, lr: float) -> None:
    for g in opt.param_groups:
        if torch.is_tensor(g["lr"]):
            g["lr"].fill_(lr)  # in place: a captured optimizer step reads this tensor
        else:
            g["lr"] = lr
