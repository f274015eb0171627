# trimmed from huggingface/text-generation-inference backends/gaudi/server/text_generation_server/models/custom_modeling/qwen2_5_vl.py at db931fcf42da: only the lines the project scan reads
    Qwen2Model,
    model_type = "qwen2_5_vl"
class Qwen2_5_VLConfig(PretrainedConfig):
        sliding_window=4096,
