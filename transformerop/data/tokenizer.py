"""Character-level tokenizer: one id per distinct character, sorted so ids are stable."""
import logging

import torch

log = logging.getLogger(__name__)


class CharTokenizer:
    def __init__(self, chars: str):
        self.chars = "".join(sorted(set(chars)))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        # code point -> id, -1 for characters outside the vocabulary
        self._lut = torch.full((max(map(ord, self.chars), default=0) + 1,), -1, dtype=torch.long)
        self._lut[torch.tensor([ord(c) for c in self.chars], dtype=torch.long)] = torch.arange(len(self.chars))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        return self.encode_tensor(text).tolist()

    def encode_tensor(self, text: str) -> torch.Tensor:
        """The ids of text as a long tensor, through a code-point lookup table: a whole corpus in
        one vectorized pass instead of a Python loop over its characters (on the start-up clock)."""
        if not text:
            return torch.empty(0, dtype=torch.long)
        points = torch.frombuffer(bytearray(text.encode("utf-32-le")), dtype=torch.int32).long()
        ids = self._lut[points.clamp(max=len(self._lut) - 1)]
        bad = ((points >= len(self._lut)) | (ids < 0)).nonzero()
        if len(bad):
            raise ValueError(f"character {text[bad[0].item()]!r} is not in the vocabulary {self.chars!r}")
        return ids

    def encode_prompt(self, prompt: str) -> list[int]:
        """A sampling prompt's ids: the default prompt, a newline, on a text without one starts
        from the first character instead (any other prompt must be in the vocabulary)."""
        if prompt == "\n" and "\n" not in self.stoi:
            log.info(f"prompt: '\\n' is not in the vocabulary {self.chars[:40]!r}...; starting from {self.chars[0]!r}")
            return [0]
        return self.encode(prompt)

    def decode(self, ids) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return "".join(self.chars[i] for i in ids)
