# trimmed from huggingface/text-generation-inference server/text_generation_server/models/custom_modeling/mpt_modeling.py at db931fcf42da: only the lines the project scan reads
        from flash_attn import bert_padding, flash_attn_interface
