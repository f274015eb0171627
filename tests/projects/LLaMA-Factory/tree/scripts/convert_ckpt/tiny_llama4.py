# trimmed from hiyouga/LLaMA-Factory scripts/convert_ckpt/tiny_llama4.py at ff6d4d12eeb0: only the lines the project scan reads
from transformers import Llama4Config, Llama4ForConditionalGeneration, Llama4TextConfig, Llama4VisionConfig
