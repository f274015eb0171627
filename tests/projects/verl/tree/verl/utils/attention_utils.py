# trimmed from volcengine/verl verl/utils/attention_utils.py at b178a3cd56f5: only the lines the project scan reads
        from flash_attn.bert_padding import index_first_axis, pad_input, rearrange, unpad_input
