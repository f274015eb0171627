# trimmed from NVIDIA/Megatron-LM megatron/core/inference/apis/async_llm.py at d98e8a64ddf3: only the lines the project scan reads
        # synchronous ``engine.generate()`` from inside the caller's asyncio
