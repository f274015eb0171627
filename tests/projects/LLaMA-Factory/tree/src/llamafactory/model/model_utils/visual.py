# trimmed from hiyouga/LLaMA-Factory src/llamafactory/model/model_utils/visual.py at ff6d4d12eeb0: only the lines the project scan reads
    model_type="gemma3",
    model_type="glm4v",
    model_type="llama4",
    model_type="qwen2_vl",
    model_type="qwen2_5_vl",
