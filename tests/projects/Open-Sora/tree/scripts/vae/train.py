# trimmed from hpcaitech/Open-Sora scripts/vae/train.py at 7ad6a96a135f: only the lines the project scan reads
                                booster.backward(loss=vae_loss / accumulation_steps, optimizer=optimizer)
