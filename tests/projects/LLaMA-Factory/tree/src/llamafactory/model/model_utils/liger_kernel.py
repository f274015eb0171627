# trimmed from hiyouga/LLaMA-Factory src/llamafactory/model/model_utils/liger_kernel.py at ff6d4d12eeb0: only the lines the project scan reads
    elif model_type == "gemma2":
    elif model_type == "gemma3":
