# trimmed from hiyouga/LLaMA-Factory src/llamafactory/v1/plugins/model_plugins/kernels/ops/mlp/cuda_fused_moe.py at ff6d4d12eeb0: only the lines the project scan reads
    "MixtralForCausalLM": {
    "Qwen3MoeForCausalLM": {
