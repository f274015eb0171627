# trimmed from haotian-liu/LLaVA llava/model/language_model/llava_llama.py at c121f0432da2: only the lines the project scan reads
                         LlamaConfig, LlamaModel, LlamaForCausalLM
        return super().generate(
