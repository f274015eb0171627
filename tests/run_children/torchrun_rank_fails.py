"""Two gloo ranks on the CPU; rank 1 fails the way seed A does (its real log, then the error)."""

import os
import sys
from pathlib import Path

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} of {dist.get_world_size()} ready", flush=True)
if rank == 1:
    log = (Path(__file__).resolve().parents[1] / "logs" / "seed_a.log").read_text()
    sys.stderr.write(log.rsplit("RuntimeError", 1)[0])
    sys.stderr.flush()
    raise RuntimeError("CUDA error: device-side assert triggered")
dist.barrier()
os._exit(0)
