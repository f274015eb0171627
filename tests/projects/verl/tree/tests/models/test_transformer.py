# trimmed from volcengine/verl tests/models/test_transformer.py at b178a3cd56f5: only the lines the project scan reads
from flash_attn.bert_padding import index_first_axis, pad_input, rearrange, unpad_input
    GemmaConfig,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
                config=config, torch_dtype=torch.bfloat16, attn_implementation="flash_attention_2"
        ({"attn_implementation": "sdpa"}, "sdpa"),  # Another override
