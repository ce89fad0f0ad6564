"""decode=compiled: the static cache's decode step through torch.compile(mode="reduce-overhead")
(CUDA graphs via Inductor on GPU; plain Inductor code on CPU)."""
from .static import Static


class Compiled(Static):
    compiled = True
