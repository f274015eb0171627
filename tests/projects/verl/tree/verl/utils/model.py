# trimmed from volcengine/verl verl/utils/model.py at b178a3cd56f5: only the lines the project scan reads
    MistralForSequenceClassification,
            attn_implementation="flash_attention_2",
