# trimmed from allenai/open-instruct scripts/data/rlvr/filtering_vllm.py at e6c3044aa620: only the lines the project scan reads
    outputs = llm.generate(prompts, sampling_params)
