# trimmed from Lightning-AI/litgpt tests/convert/test_lit_checkpoint.py at 26857050fe3f: only the lines the project scan reads
from transformers.models.gemma import GemmaConfig, GemmaForCausalLM
from transformers.models.gemma2 import Gemma2Config, Gemma2ForCausalLM
from transformers.models.gemma3 import Gemma3ForCausalLM, Gemma3TextConfig
from transformers.models.llama import LlamaConfig, LlamaForCausalLM
from transformers.models.mixtral import MixtralConfig, MixtralForCausalLM
from transformers.models.phi3.configuration_phi3 import Phi3Config
from transformers.models.qwen2 import Qwen2Config, Qwen2ForCausalLM
@pytest.mark.parametrize("model_name", ("pythia-14m", "falcon-7b", "Llama-2-7b-hf", "phi-2"))
@pytest.mark.parametrize("model_name", ("Mixtral-8x7B-Instruct-v0.1", "Mixtral-8x22B-Instruct-v0.1"))
@pytest.mark.parametrize("model_name", ("Phi-3-mini-4k-instruct",))
@pytest.mark.parametrize("model_name", ["gemma-2b", "gemma-7b"])
        "Qwen2.5-1.5B",
