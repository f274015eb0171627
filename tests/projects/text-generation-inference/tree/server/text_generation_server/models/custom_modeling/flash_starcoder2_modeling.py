# trimmed from huggingface/text-generation-inference server/text_generation_server/models/custom_modeling/flash_starcoder2_modeling.py at db931fcf42da: only the lines the project scan reads
class Starcoder2Config(PretrainedConfig):
    model_type = "starcoder2"
