# trimmed from haotian-liu/LLaVA llava/eval/run_llava.py at c121f0432da2: only the lines the project scan reads
        output_ids = model.generate(
