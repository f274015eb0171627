# trimmed from hiyouga/LLaMA-Factory scripts/convert_ckpt/llamafy_baichuan2.py at ff6d4d12eeb0: only the lines the project scan reads
    llama2_config_dict["architectures"] = ["LlamaForCausalLM"]
