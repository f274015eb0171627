# trimmed from huggingface/text-generation-inference backends/gaudi/server/text_generation_server/models/custom_modeling/flash_qwen3_moe_modeling.py at db931fcf42da: only the lines the project scan reads
from .flash_qwen3_modeling import Qwen3Attention
class Qwen3MoeAttention(nn.Module):
