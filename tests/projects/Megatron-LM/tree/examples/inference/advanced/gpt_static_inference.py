# trimmed from NVIDIA/Megatron-LM examples/inference/advanced/gpt_static_inference.py at d98e8a64ddf3: only the lines the project scan reads
        inference_engine.generate(
