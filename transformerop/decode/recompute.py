"""decode=recompute: no cache; every token reruns the whole current window through the model."""
import torch

from .base import DecodePath


class Recompute(DecodePath):
    cached = False

    def prefill(self, window):
        self.window = window
        return self.model(window)[0][:, -1]

    def forward_token(self, token):
        return self.prefill(torch.cat([self.window, token], dim=1))
