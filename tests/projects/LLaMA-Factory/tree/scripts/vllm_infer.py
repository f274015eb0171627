# trimmed from hiyouga/LLaMA-Factory scripts/vllm_infer.py at ff6d4d12eeb0: only the lines the project scan reads
    Usage: python vllm_infer.py --model_name_or_path meta-llama/Llama-2-7b-hf --template llama --dataset alpaca_en_demo
        results = llm.generate(vllm_inputs, sampling_params, lora_request=lora_request)
