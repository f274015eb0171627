# trimmed from hiyouga/LLaMA-Factory src/llamafactory/extras/constants.py at ff6d4d12eeb0: only the lines the project scan reads
        "Chinese-Llama-2-1.3B": {
        "CodeGemma-7B": {
            DownloadSource.DEFAULT: "deepseek-ai/DeepSeek-R1-0528-Qwen3-8B",
        "Gemma-2-2B": {
        "Gemma-3-270M": {
        "Jamba-v0.1": {
        "Llama-4-Scout-17B-16E": {
        "LLaVA-NeXT-Mistral-7B-Chat": {
        "Mixtral-8x7B-v0.1": {
            DownloadSource.DEFAULT: "microsoft/Phi-3-mini-4k-instruct",
        "Qwen2-0.5B": {
            DownloadSource.DEFAULT: "Qwen/Qwen2-57B-A14B",
        "Qwen3-30B-A3B-Base": {
        "Qwen2.5-Omni-3B": {
        "Qwen2-VL-2B": {
        "Qwen2.5-VL-3B-Instruct": {
        "StarCoder2-3B": {
