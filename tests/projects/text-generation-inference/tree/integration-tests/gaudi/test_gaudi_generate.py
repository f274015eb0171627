# trimmed from huggingface/text-generation-inference integration-tests/gaudi/test_gaudi_generate.py at db931fcf42da: only the lines the project scan reads
    "meta-llama/Llama-3.1-8B-Instruct-sharded": {
    "mistralai/Mistral-7B-Instruct-v0.3": {
    "bigcode/starcoder2-3b": {
    "google/gemma-7b-it": {
    "Qwen/Qwen2-0.5B-Instruct": {
