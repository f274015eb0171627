# trimmed from huggingface/text-generation-inference backends/gaudi/server/text_generation_server/models/custom_modeling/qwen2_vl.py at db931fcf42da: only the lines the project scan reads
    Qwen2Model,
class Qwen2VLAttention(nn.Module):
