# trimmed from hiyouga/LLaMA-Factory tests_v1/sampler/test_cli_sampler.py at ff6d4d12eeb0: only the lines the project scan reads
    model_args = ModelArguments(model="Qwen/Qwen3-4B-Instruct-2507")
    for new_text in sampler.generate(messages):
