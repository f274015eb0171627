# trimmed from hpcaitech/Open-Sora scripts/diffusion/train.py at 7ad6a96a135f: only the lines the project scan reads
        model_ae.encode = torch.compile(model_ae.encoder, dynamic=True)
                    booster.backward(loss=(loss / accumulation_steps), optimizer=optimizer)
