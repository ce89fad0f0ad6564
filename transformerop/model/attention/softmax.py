"""Row softmax choices for the naive path: torch's, or the seed's CUDA kernels."""
import torch


class TorchSoftmax:
    name = "torch"

    def __call__(self, x):
        return torch.softmax(x, dim=-1)

    @staticmethod
    def check(device):
        pass


SOFTMAXES = ("torch", "cuda_block", "cuda_warp", "cuda_adaptive")


def get_softmax(acfg):
    if acfg.softmax == "torch":
        return TorchSoftmax()
    if acfg.softmax in SOFTMAXES[1:]:
        from kernels.cuda_softmax import CudaSoftmax
        return CudaSoftmax(acfg.softmax, acfg.softmax_threshold)
    raise ValueError(f"attention.softmax={acfg.softmax!r}: choose one of {list(SOFTMAXES)}")
