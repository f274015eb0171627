# trimmed from volcengine/verl verl/utils/megatron/tensor_parallel.py at b178a3cd56f5: only the lines the project scan reads
        @torch.compile(dynamic=True)
    from flash_attn.bert_padding import pad_input, unpad_input
