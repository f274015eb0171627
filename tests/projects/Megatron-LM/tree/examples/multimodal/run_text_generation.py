# trimmed from NVIDIA/Megatron-LM examples/multimodal/run_text_generation.py at d98e8a64ddf3: only the lines the project scan reads
                results: List[InferenceRequest] = inference_engine.generate(
