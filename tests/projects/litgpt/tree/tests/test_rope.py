# trimmed from Lightning-AI/litgpt tests/test_rope.py at 26857050fe3f: only the lines the project scan reads
from transformers.models.llama.configuration_llama import LlamaConfig
# See https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json for settings
# See https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json for settings
