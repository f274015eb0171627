# trimmed from hiyouga/LLaMA-Factory tests/model/model_utils/test_misc.py at ff6d4d12eeb0: only the lines the project scan reads
    config = AutoConfig.from_pretrained("meta-llama/Meta-Llama-3-8B-Instruct")
