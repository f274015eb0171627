# trimmed from hiyouga/LLaMA-Factory tests/model/model_utils/test_visual.py at ff6d4d12eeb0: only the lines the project scan reads
    model_args = ModelArguments(model_name_or_path="Qwen/Qwen2-VL-2B-Instruct")
