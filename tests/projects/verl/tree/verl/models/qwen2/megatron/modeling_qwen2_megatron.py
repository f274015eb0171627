# trimmed from volcengine/verl verl/models/qwen2/megatron/modeling_qwen2_megatron.py at b178a3cd56f5: only the lines the project scan reads
from transformers.models.qwen2.configuration_qwen2 import Qwen2Config


from flash_attn.bert_padding import index_first_axis, pad_input, unpad_input  # noqa: F401, E402
