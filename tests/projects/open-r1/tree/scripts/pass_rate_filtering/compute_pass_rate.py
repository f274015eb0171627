# trimmed from huggingface/open-r1 scripts/pass_rate_filtering/compute_pass_rate.py at 1416fa0cf215: only the lines the project scan reads
        outputs = llm.generate(
