# trimmed from Lightning-AI/litgpt tests/test_trainer_support.py at 26857050fe3f: only the lines the project scan reads
    trainer = L.Trainer(
    text = lit_model.llm.generate("hello world")
