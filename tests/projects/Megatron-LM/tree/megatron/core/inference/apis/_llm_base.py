# trimmed from NVIDIA/Megatron-LM megatron/core/inference/apis/_llm_base.py at d98e8a64ddf3: only the lines the project scan reads
        records = self._engine.generate(prompts, sp)
