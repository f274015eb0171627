# trimmed from allenai/open-instruct open_instruct/test_dpo_utils.py at e6c3044aa620: only the lines the project scan reads
        args2 = make_test_args(packing=True)
