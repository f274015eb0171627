# trimmed from haotian-liu/LLaVA llava/train/train.py at c121f0432da2: only the lines the project scan reads
        model = transformers.LlamaForCausalLM.from_pretrained(
    trainer = LLaVATrainer(model=model,
