# trimmed from Lightning-AI/litgpt tests/test_lora.py at 26857050fe3f: only the lines the project scan reads
from transformers.models.gemma import GemmaConfig, GemmaForCausalLM
from transformers.models.gemma2 import Gemma2Config, Gemma2ForCausalLM
from transformers.models.gemma3 import Gemma3ForCausalLM, Gemma3TextConfig
from transformers.models.mixtral import MixtralConfig, MixtralForCausalLM
    y.sum().backward()
        "Mixtral-8x7B-Instruct-v0.1",
@pytest.mark.parametrize("model_name", ["gemma-2b", "gemma-7b"])
