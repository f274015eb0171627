# trimmed from NVIDIA/Megatron-LM megatron/core/inference/engines/static_engine.py at d98e8a64ddf3: only the lines the project scan reads
            request_records = self.dynamic_engine.generate(
