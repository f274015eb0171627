# trimmed from haotian-liu/LLaVA llava/eval/model_vqa_mmbench.py at c121f0432da2: only the lines the project scan reads
                output_ids = model.generate(
