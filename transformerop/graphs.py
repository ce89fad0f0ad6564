"""The one CUDA-graph capture: warm up on a side stream (allocations, kernel choice, lazy
init), optionally undo what the warm-up changed, then record one call of `fn` into a
torch.cuda.CUDAGraph. Replaying it re-runs every recorded kernel on the same buffers with one
launch. Decode steps, the train step, the bench forward and calibration all capture through here.

What a graph may not do (why callers look the way they do): read a device value on the host,
allocate outside its private pool after capture, or see new input tensors -- inputs are copied
into the static buffers the capture saw."""
import torch

WARMUP = 3


class Captured:
    """A recorded call: replay() runs it again and returns the tensors its capture returned."""

    def __init__(self, graph, out):
        self.graph, self.out = graph, out

    def replay(self):
        self.graph.replay()
        return self.out


def capture(fn, warmup: int = WARMUP, reset=None, warm=None) -> Captured:
    """Warm up `warmup` times on a side stream (calling warm(), default fn), call reset() (undo
    the warm-up's effects), then capture one fn() call. Autocast's weight-cast cache must be off
    inside a capture (a cached cast would be a tensor made outside the graph): callers' autocast
    contexts pass cache_enabled=False."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            (warm or fn)()
    torch.cuda.current_stream().wait_stream(side)
    if reset is not None:
        reset()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return Captured(graph, out)
