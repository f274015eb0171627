# trimmed from allenai/open-instruct scripts/weights/weight_diff.py at e6c3044aa620: only the lines the project scan reads
        out = model_recovered.generate(inputs=inputs.input_ids, max_new_tokens=100)
