# trimmed from huggingface/text-generation-inference backends/gaudi/server/text_generation_server/models/custom_modeling/vlm.py at db931fcf42da: only the lines the project scan reads
    elif config.model_type == "gemma2":
    elif config.model_type == "gemma3" or config.model_type == "gemma3_text":
