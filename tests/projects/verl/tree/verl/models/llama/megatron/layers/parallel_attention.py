# trimmed from volcengine/verl verl/models/llama/megatron/layers/parallel_attention.py at b178a3cd56f5: only the lines the project scan reads
from flash_attn.layers.rotary import apply_rotary_emb
from transformers import LlamaConfig
    from flash_attn import flash_attn_varlen_func
