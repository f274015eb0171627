"""Reference Triton kernels, one per module, each with a float64 PyTorch reference.

Importing a kernel module imports torch and triton: only repro children and tests do that, never
`check`. Without a GPU, set TRITON_INTERPRET=1 before the first import of triton. ``metadata`` is
torch only: the live probes use its checks in venvs without triton.
"""
