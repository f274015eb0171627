# trimmed from volcengine/verl tests/special_standalone/test_memory_buffers.py at b178a3cd56f5: only the lines the project scan reads
from transformers import LlamaConfig, LlamaModel
