"""Two-digit addition as characters: "37+48=085". Loss only on the answer digits; a fixed set of
held-out sums (never seen in training) is scored by exact match of greedy decoding."""
import torch

from .tokenizer import CharTokenizer

ALPHABET = "0123456789+="


def split(n_digits: int, n_test: int, seed: int):
    """All (a, b) pairs, shuffled by `seed` alone: the first n_test are held out."""
    n = 10 ** n_digits
    if n_test >= n * n:
        raise ValueError(f"data.n_test={n_test} leaves no training sums out of {n * n}")
    pairs = torch.cartesian_prod(torch.arange(n), torch.arange(n))
    perm = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed))
    pairs = pairs[perm]
    return pairs[n_test:], pairs[:n_test]


def format_sum(a: int, b: int, n_digits: int) -> str:
    return f"{a:0{n_digits}d}+{b:0{n_digits}d}={a + b:0{n_digits + 1}d}"


class AdditionData:
    """Every training sum resident on the device; a batch is a random index draw there."""

    kind = "addition"

    def __init__(self, cfg, block_size: int, device):
        self.tokenizer = CharTokenizer(ALPHABET)
        self.n_digits = cfg.n_digits
        self.prompt_len = 2 * cfg.n_digits + 2  # "ab+cd="
        self.answer_len = cfg.n_digits + 1
        seq_len = self.prompt_len + self.answer_len
        if block_size < seq_len - 1:
            raise ValueError(f"model.block_size={block_size} is shorter than an addition sequence ({seq_len - 1})")
        train, test = split(cfg.n_digits, cfg.n_test, cfg.split_seed)
        self.splits = {"train": self._encode(train).to(device), "val": self._encode(test).to(device)}
        self.test_pairs = test
        self.device = device

    def _encode(self, pairs):
        return torch.tensor([self.tokenizer.encode(format_sum(int(a), int(b), self.n_digits))
                             for a, b in pairs.tolist()], dtype=torch.long)

    def _xy(self, seqs):
        x, y = seqs[:, :-1], seqs[:, 1:].clone()
        y[:, : self.prompt_len - 1] = -1  # loss only where the next character is an answer digit
        return x, y

    def batch(self, split: str, batch_size: int, generator=None):
        seqs = self.splits[split]
        idx = torch.randint(len(seqs), (batch_size,), device=self.device, generator=generator)
        return self._xy(seqs[idx])

    def eval_batches(self, split: str, batch_size: int):
        seqs = self.splits[split]
        for i in range(0, len(seqs), batch_size):
            yield self._xy(seqs[i:i + batch_size])

    @torch.no_grad()
    def exact_match(self, model, split: str = "val", batch_size: int = 1000):
        """Greedy autoregressive answers for every sum of the split; fraction fully right, samples."""
        was_training = model.training
        model.eval()
        seqs = self.splits[split]
        correct, samples = 0, []
        for i in range(0, len(seqs), batch_size):
            s = seqs[i:i + batch_size]
            out = s[:, : self.prompt_len]
            for _ in range(self.answer_len):
                logits, _ = model(out)
                out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            correct += (out == s).all(dim=1).sum().item()
            if not samples:
                samples = [self.tokenizer.decode(r) for r in out[:8]]
        model.train(was_training)
        return correct / len(seqs), samples
