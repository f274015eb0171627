# trimmed from axolotl-ai-cloud/axolotl tests/e2e/patched/lora_kernels/test_lora_kernel_patching.py at 067b021c8b87: only the lines the project scan reads
from transformers import AutoModelForCausalLM, LlamaForCausalLM
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeAttention
        "name": "axolotl-ai-co/tiny-gemma2-137m",
        ("Qwen/Qwen3-30B-A3B", Qwen3MoeAttention),
        ("mhenrichsen/gemma-2b", apply_lora_mlp_geglu),
    out.float().pow(2).mean().backward()
