# trimmed from hiyouga/LLaMA-Factory scripts/qwen_omni_merge.py at ff6d4d12eeb0: only the lines the project scan reads
        from transformers.models.qwen2_5_omni import Qwen2_5OmniThinkerForConditionalGeneration  # type: ignore
