# trimmed from huggingface/text-generation-inference backends/gaudi/server/text_generation_server/models/flash_vlm_causal_lm.py at db931fcf42da: only the lines the project scan reads
    elif config.model_type == "gemma3":
