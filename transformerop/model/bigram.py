"""Bigram baseline: the next character's logits are a lookup on the current character."""
import torch.nn as nn
import torch.nn.functional as F


class Bigram(nn.Module):
    def __init__(self, cfg, acfg, vocab_size: int):
        super().__init__()
        self.cfg, self.vocab_size, self.block_size = cfg, vocab_size, cfg.block_size
        self.table = nn.Embedding(vocab_size, vocab_size)
        nn.init.zeros_(self.table.weight)  # start from the uniform prediction, loss ln(V)
        self.blocks = []

    def forward(self, idx, targets=None, caches=None, pos=None):
        logits = self.table(idx)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-1)
        return logits, loss
