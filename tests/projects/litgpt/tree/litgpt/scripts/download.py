# trimmed from Lightning-AI/litgpt litgpt/scripts/download.py at 26857050fe3f: only the lines the project scan reads
            "for example, `litgpt download NousResearch/Hermes-2-Pro-Llama-3-8B --model_name Llama-3-8B`."
