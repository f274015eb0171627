# trimmed from volcengine/verl tests/workers/actor/test_special_dp_actor.py at b178a3cd56f5: only the lines the project scan reads
from transformers import AutoModelForCausalLM, Qwen3Config
            use_torch_compile=False,  # Disable torch.compile for testing
