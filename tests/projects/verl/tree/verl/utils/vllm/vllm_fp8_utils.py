# trimmed from volcengine/verl verl/utils/vllm/vllm_fp8_utils.py at b178a3cd56f5: only the lines the project scan reads
            if (isinstance(module, LinearBase) and module.weight.dtype == torch.float8_e4m3fn) or (
