# trimmed from OpenRLHF/OpenRLHF openrlhf/models/model.py at 3c3be6234e0c: only the lines the project scan reads
    attn_implementation="flash_attention_2",
