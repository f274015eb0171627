# trimmed from haotian-liu/LLaVA llava/train/train_mem.py at c121f0432da2: only the lines the project scan reads
    train(attn_implementation="flash_attention_2")
