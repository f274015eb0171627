# trimmed from hiyouga/LLaMA-Factory src/llamafactory/model/model_utils/quantization.py at ff6d4d12eeb0: only the lines the project scan reads
        if getattr(config, "model_type", None) in ["gemma3", "paligemma"]:
