"""torchrun / DistributedDataParallel plumbing. Without torchrun's environment every function
is a no-op for a single process, so the training loop reads the same either way."""
import os

import torch
import torch.distributed as dist


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main() -> bool:
    return rank() == 0


def init(device: torch.device) -> torch.device:
    """Join the process group when launched by torchrun; returns this rank's device."""
    if world_size() == 1:
        return device
    if device.type == "cuda":
        device = torch.device("cuda", local_rank())
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return device


def active() -> bool:
    return dist.is_available() and dist.is_initialized() and world_size() > 1


def gather_objects(obj) -> list:
    """Every rank's obj, in rank order (a collective: all ranks must call it)."""
    if not active():
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    if active():
        dist.barrier()


def shutdown() -> None:
    if active():
        dist.destroy_process_group()
