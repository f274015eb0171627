# trimmed from NVIDIA/Megatron-LM megatron/core/export/trtllm/trt_model_config.py at d98e8a64ddf3: only the lines the project scan reads
    ModelType.gemma: tensorrt_llm.models.GemmaConfig,
