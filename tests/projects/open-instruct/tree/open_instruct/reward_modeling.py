# trimmed from allenai/open-instruct open_instruct/reward_modeling.py at e6c3044aa620: only the lines the project scan reads
                accelerator.backward(loss)
