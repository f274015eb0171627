# trimmed from haotian-liu/LLaVA llava/model/language_model/llava_mistral.py at c121f0432da2: only the lines the project scan reads
                         MistralConfig, MistralModel, MistralForCausalLM
        return super().generate(
