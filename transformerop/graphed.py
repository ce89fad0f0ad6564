"""train.cuda_graph: the whole optimizer step (forward, backward, grad clip, fused AdamW) captured
once in a torch.cuda.CUDAGraph and replayed every step, so a step costs one graph launch instead
of ~500 eager ones: the lever for a launch-bound train step. The batch is sampled outside the
graph into static buffers; the learning rate is a device tensor the schedule fills each step."""
import torch

from .runtime import autocast

WARMUP = 3  # eager steps on a side stream before capture: allocations, kernel choice, optimizer state


class GraphedStep:
    def __init__(self, trainer):
        self.tr = trainer
        gen = torch.Generator(device=trainer.device).manual_seed(0)  # shapes only: the real stream is untouched
        x, y = trainer.data.batch("train", trainer.t.batch_size, gen)
        self.x, self.y = x.clone(), y.clone()
        self.graph, self.loss = None, None

    def _body(self):
        tr = self.tr
        with autocast(tr.device, tr.t.dtype):
            _, loss = tr.model(self.x, self.y)
        loss.backward()
        if tr.t.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(tr.model.parameters(), tr.t.grad_clip)  # stays on the device
        tr.opt.step()
        return loss.detach()

    def _tensors(self):
        """Everything a warm-up step changes: parameters and optimizer state."""
        params = list(self.tr.model.parameters())
        state = [v for p in params for v in self.tr.opt.state.get(p, {}).values() if torch.is_tensor(v)]
        return params + state

    def capture(self):
        tr = self.tr
        before = {id(t): t.detach().clone() for t in self._tensors()}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP):
                tr.opt.zero_grad(set_to_none=True)
                self._body()
        torch.cuda.current_stream().wait_stream(side)
        with torch.no_grad():  # undo the warm-up: weights and optimizer state as they were
            for t in self._tensors():
                t.copy_(before[id(t)]) if id(t) in before else t.zero_()  # fresh Adam state is zeros
        tr.opt.zero_grad(set_to_none=True)  # grads are then allocated inside the graph's pool
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.loss = self._body()

    def __call__(self, step: int):
        tr = self.tr
        x, y = tr.data.batch("train", tr.t.batch_size, tr.gen)
        self.x.copy_(x)
        self.y.copy_(y)
        if self.graph is None:
            self.capture()
        self.graph.replay()
        return self.loss
