# trimmed from volcengine/verl verl/models/llama/megatron/modeling_llama_megatron.py at b178a3cd56f5: only the lines the project scan reads
from transformers.models.llama.configuration_llama import LlamaConfig


from flash_attn.bert_padding import index_first_axis, pad_input, unpad_input  # noqa: F401, E402
