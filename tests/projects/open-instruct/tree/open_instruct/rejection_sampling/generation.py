# trimmed from allenai/open-instruct open_instruct/rejection_sampling/generation.py at e6c3044aa620: only the lines the project scan reads
    outputs = llm.generate(
