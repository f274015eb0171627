# trimmed from volcengine/verl verl/models/qwen2/megatron/layers/parallel_attention.py at b178a3cd56f5: only the lines the project scan reads
    from flash_attn import flash_attn_varlen_func
from transformers import Qwen2Config
