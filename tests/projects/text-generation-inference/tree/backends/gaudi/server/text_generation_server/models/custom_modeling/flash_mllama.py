# trimmed from huggingface/text-generation-inference backends/gaudi/server/text_generation_server/models/custom_modeling/flash_mllama.py at db931fcf42da: only the lines the project scan reads
# Copied from transformers.models.gemma2.modeling_gemma2.Gemma2MLP with Gemma2->MllamaText
        config.text_config._attn_implementation = "sdpa"
