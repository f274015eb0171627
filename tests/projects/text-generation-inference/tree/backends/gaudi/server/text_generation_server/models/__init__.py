# trimmed from huggingface/text-generation-inference backends/gaudi/server/text_generation_server/models/__init__.py at db931fcf42da: only the lines the project scan reads
        Llama4ForConditionalGeneration,
        FlashGemma2ForCausalLM,
        Gemma3ForConditionalGeneration,
        Qwen2ForCausalLM,
        Qwen3ForCausalLM,
        Qwen3MoeForCausalLM,
        Qwen2VLForConditionalGeneration,
        Qwen2_5_VLConfig,
        "url": "https://huggingface.co/microsoft/Phi-3-mini-4k-instruct",
        "url": "https://huggingface.co/google/gemma-7b",
    GEMMA2 = {
    GEMMA3 = {
        "url": "https://huggingface.co/mistralai/Mistral-Nemo-Instruct-2407",
        "url": "https://huggingface.co/mistralai/Mixtral-8x22B-Instruct-v0.1",
        "url": "https://huggingface.co/bigcode/starcoder2-15b-instruct-v0.1",
        "url": "https://huggingface.co/collections/Qwen/qwen2-6659360b33528ced941e557f",
        "url": "https://huggingface.co/collections/Qwen/qwen2-vl-66cee7455501d7126940800d",
        kv_cache_dtype = torch.float8_e4m3fn
