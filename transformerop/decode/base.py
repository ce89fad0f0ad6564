"""The contract every decode path follows, and what it declares about itself.

A path prefills a window (the prompt, or the last `keep` tokens when the window restarts) and
then feeds one token at a time, returning the last position's logits (B, V) each time; the loop
in decode/loop.py drives it. Capabilities are class attributes and class methods, read by
decode.check, the loop (capture / compile), predict (kernels per token, launch cost) and the
report; nothing else keeps a list of path names."""

import torch

from ..errors import BackendUnavailable, ConfigError
from ..runtime import interpreting


def model_device(model):
    return next(model.parameters()).device


def check_triton_step(cfg, device) -> None:
    """What a path whose decode step is its own Triton kernels over GPT blocks needs: CUDA, or the
    interpreter in fp32 (its bf16 is wrong), and a GPT."""
    name = cfg.decode.name
    if torch.device(device).type != "cuda" and not interpreting():
        raise BackendUnavailable(f"decode={name} needs CUDA for its Triton kernels (or TRITON_INTERPRET=1, slowly)")
    if interpreting() and cfg.train.dtype == "bfloat16":
        raise BackendUnavailable(f"decode={name} in bf16 needs a GPU: the Triton interpreter computes bf16 "
                                 "wrongly; use train.dtype=float32 there")
    if cfg.model.name != "gpt":
        raise ValueError(f"decode={name} runs GPT blocks in its kernels; model={cfg.model.name} has none: use a path "
                         "that runs the model itself")


class DecodePath:
    cached = True  # keeps K/V of earlier tokens (the attention backend must support a cache)
    masked = False  # attends over a preallocated cache under an explicit validity mask
    graphed = False  # on CUDA, one decode step is captured in a CUDA graph and replayed per token
    compiled = False  # one decode step goes through torch.compile(mode="reduce-overhead")
    runs = False  # run(out, t, noise, temperature, top_k, n): n steps in one call (the loop hands it
    # every step up to the window's end; it samples and advances t itself)
    gelus = ("erf", "tanh")  # the model.gelu forms it computes: a path running the model's modules, any
    max_vocab = None  # the largest vocabulary its kernels sample from (None: any)

    def __init__(self, model, batch_size: int, dcfg=None):
        self.model, self.batch_size = model, batch_size

    # -- what a path does ---------------------------------------------------------------------
    def prefill(self, window):
        """Run the window (B, T) through the model from an empty cache; last logits (B, V)."""
        raise NotImplementedError

    def forward_token(self, token):
        """One new token (B, 1) against what the path holds; last logits (B, V)."""
        raise NotImplementedError

    def rewind(self) -> None:
        """An empty cache (warm-up steps start from here)."""

    def phase_profile(self, dec, prompt) -> dict:
        """Where one generation's time goes inside a launch (the phases of a persistent kernel); a path
        whose launches are the model's own kernels has nothing to add to the kernel profile."""
        return {}

    def state(self) -> list:
        """Device tensors a compiled step mutates in place (marked static for its CUDA graphs)."""
        return []

    # -- what a path declares -----------------------------------------------------------------
    @classmethod
    def check(cls, cfg, device) -> None:
        """Raise ValueError (cannot work) or BackendUnavailable (cannot run here) before any work."""
        if cls.graphed and torch.device(device).type != "cuda":
            raise BackendUnavailable(f"decode={cfg.decode.name} needs CUDA (it replays a CUDA graph per token)")

    @classmethod
    def check_vocab(cls, name: str, vocab_size: int) -> None:
        """Raise ConfigError for a vocabulary its kernels cannot sample from: called as soon as the
        vocabulary is known (the data or the checkpoint), before any training or decoding."""
        if cls.max_vocab is not None and vocab_size > cls.max_vocab:
            raise ConfigError(f"decode={name} samples a whole row of logits inside its kernels: vocabulary "
                              f"{vocab_size} > {cls.max_vocab}; use a decode path that samples outside them")

    @classmethod
    def kernels_per_token(cls, shape, bf16: bool) -> int:
        """Kernels one decode step launches (or graph nodes it replays): the launch term. A step
        against a cache runs the model's plain blocks (model.fused_norm fuses only cache-free
        forwards)."""
        import dataclasses

        from ..measure import roofline as R
        if cls.cached:
            shape = dataclasses.replace(shape, fused_norm=False)
        return R.kernels_per_decode_token(shape, bf16=bf16)

    @classmethod
    def launch_key(cls, device) -> str:
        """The calibrated per-kernel cost that prices this path's kernels (graph nodes on CUDA)."""
        return "graph_node_us" if (cls.graphed or cls.compiled) and torch.device(device).type == "cuda" \
            else "op_infer_us"
