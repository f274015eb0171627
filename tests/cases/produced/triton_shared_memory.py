"""A Triton kernel whose tiles need more shared memory than the GPU has per block."""

import torch
import triton
import triton.language as tl


@triton.jit
def big_tiles(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    a = tl.load(x_ptr + offsets[:, None] * BLOCK + offsets[None, :])
    b = tl.load(x_ptr + offsets[:, None] * BLOCK + offsets[None, :])
    c = tl.dot(a, b)
    tl.store(out_ptr + offsets[:, None] * BLOCK + offsets[None, :], c)


x = torch.randn(512, 512, device="cuda", dtype=torch.float16)
out = torch.empty(512, 512, device="cuda", dtype=torch.float32)
big_tiles[(1,)](x, out, BLOCK=512, num_stages=4)
torch.cuda.synchronize()
