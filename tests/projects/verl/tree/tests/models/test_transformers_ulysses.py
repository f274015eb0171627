# trimmed from volcengine/verl tests/models/test_transformers_ulysses.py at b178a3cd56f5: only the lines the project scan reads
from flash_attn.bert_padding import index_first_axis, rearrange, unpad_input
from transformers import AutoModelForCausalLM, LlamaConfig, PretrainedConfig, Qwen2Config
            config=config, torch_dtype=torch.bfloat16, attn_implementation="flash_attention_2"
    mean_full.backward()
