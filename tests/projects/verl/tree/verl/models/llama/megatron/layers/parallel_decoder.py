# trimmed from volcengine/verl verl/models/llama/megatron/layers/parallel_decoder.py at b178a3cd56f5: only the lines the project scan reads
from transformers import LlamaConfig
