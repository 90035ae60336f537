"""nanoGPT's DDP start on a CPU-only torch (train.py --device=cpu under torchrun): the process group
forms, then torch.cuda.set_device raises on one rank. Chatty first, as a training script is, so the
exception sits well above the log's last 2 KiB. The other ranks wait outside any collective (a peer's
error in a barrier could race the cause to torchrun's monitor); torchrun stops them."""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for i in range(40):
    print(f"rank {rank} overriding config key_{i} = {i * 0.001:.6f} (a line of a chatty config dump)", flush=True)
if rank == int(os.environ.get("FAILING_RANK", "3")):
    torch.cuda.set_device(f"cuda:{os.environ['LOCAL_RANK']}")
time.sleep(120)
