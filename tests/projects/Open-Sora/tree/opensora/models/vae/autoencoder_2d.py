# trimmed from hpcaitech/Open-Sora opensora/models/vae/autoencoder_2d.py at 7ad6a96a135f: only the lines the project scan reads
        h_ = nn.functional.scaled_dot_product_attention(q, k, v)
