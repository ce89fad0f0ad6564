"""Sampling on the device (Gumbel-max): token = argmax(logits / temperature + g), g = -log(E),
E ~ Exp(1), with logits outside the top k set to -inf first. This draws from
softmax(logits / temperature) like torch.multinomial, but the noise for every column is drawn up
front from the caller's generator, so a captured graph consumes pre-drawn noise (no RNG inside
the graph), the same seed gives the same text, and in fp32 every path gives the same tokens for
the same seed. temperature 0 = greedy."""
import torch


def gumbel_noise(shape, device, generator=None) -> torch.Tensor:
    return torch.empty(shape, device=device).exponential_(generator=generator).log_().neg_()


def sample_next(logits, temperature: float, top_k=None, generator=None, noise=None):
    """logits (B, V) -> (B, 1) token ids. temperature 0 = greedy; otherwise Gumbel-max with `noise`
    (B, V) if given, else noise drawn from `generator`."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if noise is None:
        noise = gumbel_noise(logits.shape, logits.device, generator)
    return (logits + noise).argmax(-1, keepdim=True)
