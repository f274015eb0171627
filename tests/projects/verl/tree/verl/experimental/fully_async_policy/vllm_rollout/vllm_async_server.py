# trimmed from volcengine/verl verl/experimental/fully_async_policy/vllm_rollout/vllm_async_server.py at b178a3cd56f5: only the lines the project scan reads
        generator = self.engine.generate(prompt=prompt, sampling_params=sampling_params, request_id=request_id)
