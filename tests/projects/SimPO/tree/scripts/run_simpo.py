# trimmed from princeton-nlp/SimPO scripts/run_simpo.py at 1b3e8f3528a2: only the lines the project scan reads
    trainer = SimPOTrainer(
