# trimmed from allenai/open-instruct open_instruct/test_olmo_core_train_modules.py at e6c3044aa620: only the lines the project scan reads
        pg_loss.sum().backward()
