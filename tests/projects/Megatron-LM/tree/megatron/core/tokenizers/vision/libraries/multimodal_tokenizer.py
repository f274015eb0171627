# trimmed from NVIDIA/Megatron-LM megatron/core/tokenizers/vision/libraries/multimodal_tokenizer.py at d98e8a64ddf3: only the lines the project scan reads
# https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/blob/main/tokenizer_config.json#L2053
