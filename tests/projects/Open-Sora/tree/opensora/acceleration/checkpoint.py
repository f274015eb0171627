# trimmed from hpcaitech/Open-Sora opensora/acceleration/checkpoint.py at 7ad6a96a135f: only the lines the project scan reads
        return CheckpointFunction.backward(ctx, *args)
            the RNG state during each checkpoint. Note that under torch.compile,
