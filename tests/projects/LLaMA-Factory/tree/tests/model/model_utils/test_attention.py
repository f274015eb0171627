# trimmed from hiyouga/LLaMA-Factory tests/model/model_utils/test_attention.py at ff6d4d12eeb0: only the lines the project scan reads
        "disabled": "LlamaAttention",
