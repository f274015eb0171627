# trimmed from NVIDIA/Megatron-LM megatron/core/inference/text_generation_server/run_mcore_engine.py at d98e8a64ddf3: only the lines the project scan reads
    result = engine.generate(inference_requests=requests)
