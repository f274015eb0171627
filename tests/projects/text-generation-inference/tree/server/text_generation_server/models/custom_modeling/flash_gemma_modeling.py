# trimmed from huggingface/text-generation-inference server/text_generation_server/models/custom_modeling/flash_gemma_modeling.py at db931fcf42da: only the lines the project scan reads
class GemmaConfig(PretrainedConfig):
        head_dim=256,
