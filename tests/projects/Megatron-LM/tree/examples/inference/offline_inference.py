# trimmed from NVIDIA/Megatron-LM examples/inference/offline_inference.py at d98e8a64ddf3: only the lines the project scan reads
                results = llm.generate(prompts_list, sampling_params)
