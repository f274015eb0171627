# trimmed from hiyouga/LLaMA-Factory scripts/convert_ckpt/tiny_qwen3.py at ff6d4d12eeb0: only the lines the project scan reads
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM
    tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen3-4B-Instruct-2507")
