# trimmed from huggingface/text-generation-inference server/text_generation_server/models/__init__.py at db931fcf42da: only the lines the project scan reads
        FlashGemma2ForCausalLM,
        FlashGemma3ForCausalLM,
        Gemma3ForConditionalGeneration,
    from text_generation_server.models.custom_modeling.gemma3.processing_gemma3 import (
        Qwen2ForCausalLM,
        Qwen2VLForConditionalGeneration,
        Qwen2_5_VLConfig,
        "url": "https://huggingface.co/microsoft/Phi-3-mini-4k-instruct",
        "url": "https://huggingface.co/google/gemma-7b",
    GEMMA2 = {
        "url": "https://huggingface.co/mistralai/Mistral-Nemo-Instruct-2407",
        "url": "https://huggingface.co/mistralai/Mixtral-8x22B-Instruct-v0.1",
        "url": "https://huggingface.co/bigcode/starcoder2-15b-instruct-v0.1",
        "url": "https://huggingface.co/collections/Qwen/qwen2-6659360b33528ced941e557f",
        "url": "https://huggingface.co/collections/Qwen/qwen2-vl-66cee7455501d7126940800d",
            kv_cache_dtype = torch.float8_e4m3fn
            from transformers import Llama4ForConditionalGeneration as Llama4Model
