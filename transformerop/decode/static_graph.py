"""decode=static_graph: the static cache with one decode step (forward + sampling +
bookkeeping) captured in a CUDA graph after warm-up on a side stream; each token is one replay."""
from .static import Static


class StaticGraph(Static):
    graphed = True
