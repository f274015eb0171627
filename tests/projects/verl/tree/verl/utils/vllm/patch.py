# trimmed from volcengine/verl verl/utils/vllm/patch.py at b178a3cd56f5: only the lines the project scan reads
    from vllm.model_executor.models.mixtral import MixtralForCausalLM
    from vllm.model_executor.models.qwen2_moe import Qwen2MoeForCausalLM
    from vllm.model_executor.models.qwen3_moe import Qwen3MoeForCausalLM
