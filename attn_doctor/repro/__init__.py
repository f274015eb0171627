"""Reproductions: bundled reference kernels run on a known-buggy and a correct configuration,
each case in its own child process (a device-side assert poisons the CUDA context)."""
