# trimmed from volcengine/verl verl/utils/kernel/fp8_kernel.py at b178a3cd56f5: only the lines the project scan reads
FP8_DTYPE = torch.float8_e4m3fn
