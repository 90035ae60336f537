"""Host buffers, copies and mixed precision, right for CPU and for CUDA.

The device itself comes from `distributed.process_group` (LOCAL_RANK, with
`torch.cuda.set_device` before the process group). Pinned host memory and
non-blocking copies only pay off, and are only used, when the device is
CUDA. bf16 autocast covers the network's forward pass only: log-probs,
ratios, Q-values, TD targets and losses are computed in fp32 (the heads
return fp32), so mixed precision changes matrix maths, not the RL maths.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

PRECISIONS = ("fp32", "bf16")
CPU = torch.device("cpu")


def host_zeros(shape: tuple[int, ...], dtype: np.dtype | type, device: torch.device) -> np.ndarray:
    """A zeroed numpy array whose memory is pinned when `device` is CUDA,
    so its host-to-device copies can run asynchronously."""
    if device.type != "cuda":
        return np.zeros(shape, dtype)
    torch_dtype = torch.from_numpy(np.zeros((), dtype)).dtype
    return torch.zeros(shape, dtype=torch_dtype, pin_memory=True).numpy()  # host: pinned, for asynchronous copies


def to_device(array: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """Same dtype on `device` (uint8 frames stay uint8); non-blocking only
    for CUDA, where the source is pinned."""
    tensor = torch.from_numpy(array) if isinstance(array, np.ndarray) else array
    return tensor.to(device, non_blocking=device.type == "cuda")


def upload(array: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host array (or tensor) made for one copy (a minibatch order, a replay draw) on
    `device`. On CUDA the copy is staged in pinned memory from torch's caching
    host allocator, which keeps the block until the copy is done; a copy from
    pageable memory would first wait for every kernel already queued."""
    tensor = torch.from_numpy(np.ascontiguousarray(array)) if isinstance(array, np.ndarray) else array
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


# Work beside the update (learnWhileCollecting's acting, evalWhileTraining's evaluation) runs on streams of torch's
# high-priority pool; CUDA graph captures and their warm-ups (learners.StepGraph) on default-priority ones. torch hands
# pool streams out round robin, 32 per priority, so the 33rd is the 1st again (c10/cuda/CUDAStream.h, "Stream pool
# note"): a default-priority stream taken per update became the optimiser capture's own stream after a few dozen
# updates, the acting thread's kernels joined the capture, and its sampling failed ("Attempt to increase offset for
# a CUDA generator not in capture mode": learnWhileCollecting on an H200, 2026-11-29, near update 60).
BESIDE_UPDATE_PRIORITY = -1


def stream_after_current(device: torch.device) -> contextlib.AbstractContextManager:
    """A context that puts CUDA work on a stream of its own, ordered after everything
    queued so far on this thread's current stream; enter it on the thread that does
    the work (the current stream is per thread). The stream is never one a CUDA graph
    captures on (BESIDE_UPDATE_PRIORITY). Nothing off CUDA."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    stream = torch.cuda.Stream(device, priority=BESIDE_UPDATE_PRIORITY)
    stream.wait_stream(torch.cuda.current_stream(device))
    return torch.cuda.stream(stream)


def on_host(tree):
    """`tree` (dicts, lists and tuples of tensors and plain values) with every
    tensor copied to host memory: a model a GPU rank saves then loads where
    there is no GPU, with a plain torch.load (no map_location)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, dict):
        return {key: on_host(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(on_host(value) for value in tree)
    return tree


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device` when precision is "bf16" (CUDA or CPU:
    the CPU path runs the very code a GPU would), else nothing."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS} (got {precision!r})")
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def full_precision(device: torch.device) -> contextlib.AbstractContextManager:
    """autocast switched off on `device` while it is on, for a part of the forward pass that runs in fp32
    under bf16 (a recurrent policy's LSTM: its state is carried in fp32 between acting steps, and CPU
    autocast's oneDNN LSTM refuses bf16 where the CPU lacks bf16 instructions); nothing otherwise."""
    if device.type not in ("cpu", "cuda") or not torch.is_autocast_enabled(device.type):
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, enabled=False)


def tune(device: torch.device, deterministic: bool) -> None:
    """cuDNN picks its fastest convolutions for the fixed Atari shapes, and
    fp32 matmuls may use TF32 tensor cores; deterministic mode keeps neither."""
    if device.type != "cuda" or deterministic:
        return
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def gpus_missing(gpus_per_worker: int, device: torch.device) -> str | None:
    """A line for rank 0's log when the spec asks for GPUs and the rank computes on the CPU
    anyway: a CPU build of torch in a GPU pod leaves its GPUs idle, and `kuberl run` of a GPU
    example on a machine without one trains on CPU (it can; the user should know)."""
    if gpus_per_worker == 0 or device.type == "cuda":
        return None
    return (f"spec.gpusPerWorker is {gpus_per_worker}, but torch {torch.__version__} sees no CUDA device here "
            f"(a CPU build of torch, or no GPU on this machine): the ranks train on the CPU")


def describe(device: torch.device) -> str:
    """One line for the start-up log: what this rank computes on."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"{device} ({props.name}, {props.total_memory / 2**30:.0f} GiB, bf16 {'yes' if torch.cuda.is_bf16_supported() else 'no'})"
    return f"cpu ({torch.get_num_threads()} threads)"
