# trimmed from allenai/open-instruct open_instruct/dpo_utils.py at e6c3044aa620: only the lines the project scan reads
            fn = functools.partial(fn, packing=True)
