# trimmed from NVIDIA/Megatron-LM examples/inference/advanced/simple_t5_batch_inference.py at d98e8a64ddf3: only the lines the project scan reads
    results: List[InferenceRequest] = inference_engine.generate(
