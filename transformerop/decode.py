"""Generation: prompt prefill, then one token at a time, sampled on the device (no host sync
inside the loop). Paths are chosen by `decode.name`; this file grows the cached paths."""
import torch


def sample_next(logits, temperature: float, top_k, generator=None):
    """logits (B, V) -> (B, 1). temperature 0 = greedy."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)


@torch.no_grad()
def generate(model, idx, max_new_tokens: int, temperature: float = 1.0, top_k=None, path: str = "recompute",
             generator=None):
    """Append max_new_tokens to idx (B, T0). `recompute`: each step reruns the last block_size tokens."""
    if path != "recompute":
        raise ValueError(f"decode={path} is not implemented yet")
    was_training = model.training
    model.eval()
    for _ in range(max_new_tokens):
        logits, _ = model(idx[:, -model.block_size:])
        idx = torch.cat([idx, sample_next(logits[:, -1], temperature, top_k, generator)], dim=1)
    model.train(was_training)
    return idx
