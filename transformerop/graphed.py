"""train.cuda_graph: Trainer's own step (forward_backward + optimizer_step: forward, backward,
grad clip, fused AdamW, grads dropped) captured once and replayed every step, so a step costs
one graph launch instead of ~500 eager ones: the lever for a launch-bound train step.

The batch is sampled outside the graph into static buffers; the learning rate is a device
tensor the schedule fills each step. The capture happens at the first step the loop (or a
bench) takes, in training mode, so dropout -- torch's and the fused attention kernels' -- is
recorded with fresh random numbers on every replay; a correctness gate run before that goes
through the eager step and cannot change what the graph holds."""
import torch

from . import clock
from .graphs import capture


class GraphedStep:
    def __init__(self, trainer):
        self.tr = trainer
        gen = torch.Generator(device=trainer.device).manual_seed(0)  # shapes only: the real stream is untouched
        x, y = trainer.data.batch("train", trainer.t.batch_size, gen)
        self.x, self.y = x.clone(), y.clone()
        self.captured = None

    def _body(self):
        loss = self.tr.forward_backward(self.x, self.y)
        self.tr.optimizer_step()
        return loss

    def _tensors(self):
        """Everything a warm-up step changes: parameters (and train.master_weights' masters) and
        optimizer state."""
        params = list(self.tr.model.parameters())
        stepped = [p for g in self.tr.opt.param_groups for p in g["params"]]
        ids = {id(p) for p in params}
        params += [p for p in stepped if id(p) not in ids]
        state = [v for p in params for v in self.tr.opt.state.get(p, {}).values() if torch.is_tensor(v)]
        return params + state

    def capture(self) -> None:
        tr = self.tr
        was_training = tr.model.training
        tr.model.train()  # what the loop runs: dropout on
        before = {id(t): t.detach().clone() for t in self._tensors()}

        def undo_warmup():  # weights and optimizer state as they were; fresh Adam state is zeros
            with torch.no_grad():
                for t in self._tensors():
                    t.copy_(before[id(t)]) if id(t) in before else t.zero_()
            tr.opt.zero_grad(set_to_none=True)  # grads are then allocated inside the graph's pool
        self.captured = capture(self._body, reset=undo_warmup)
        tr.model.train(was_training)
        clock.mark("capture")

    def __call__(self, step: int):
        tr = self.tr
        x, y = tr.data.batch("train", tr.t.batch_size, tr.gen)
        self.x.copy_(x)
        self.y.copy_(y)
        if self.captured is None:
            self.capture()
        return self.captured.replay()
