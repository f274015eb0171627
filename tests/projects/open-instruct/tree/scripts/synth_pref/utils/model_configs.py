# trimmed from allenai/open-instruct scripts/synth_pref/utils/model_configs.py at e6c3044aa620: only the lines the project scan reads
    "Meta-Llama/Llama-3-8B-Instruct": {
    "mistralai/Mistral-7B-Instruct-v0.2": {
    "google/gemma-2-27b-it": {
    "Qwen/Qwen2.5-72B-Instruct": {
