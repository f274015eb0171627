# trimmed from volcengine/verl verl/models/qwen2/megatron/layers/parallel_rmsnorm.py at b178a3cd56f5: only the lines the project scan reads
from transformers import Qwen2Config
