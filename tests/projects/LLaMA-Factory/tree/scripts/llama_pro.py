# trimmed from hiyouga/LLaMA-Factory scripts/llama_pro.py at ff6d4d12eeb0: only the lines the project scan reads
    Usage: python llama_pro.py --model_name_or_path meta-llama/Llama-2-7b-hf --output_dir llama2_pro --num_expand 8
