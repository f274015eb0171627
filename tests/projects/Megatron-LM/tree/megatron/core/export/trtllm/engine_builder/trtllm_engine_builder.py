# trimmed from NVIDIA/Megatron-LM megatron/core/export/trtllm/engine_builder/trtllm_engine_builder.py at d98e8a64ddf3: only the lines the project scan reads
            if trtllm_model_config.architecture == "LlamaForCausalLM"
