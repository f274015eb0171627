# trimmed from volcengine/verl verl/utils/megatron/pipeline_parallel.py at b178a3cd56f5: only the lines the project scan reads
    from flash_attn.bert_padding import unpad_input  # flash 2 is a must for Megatron
