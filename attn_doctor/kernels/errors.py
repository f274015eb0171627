"""The error every kernel launcher raises when its metadata would make the kernel index out of bounds."""


class MetadataError(ValueError):
    """Kernel metadata (lengths, offsets, indices, dimensions) that would read or write out of bounds.

    Raised on the host before a CPU (interpreter) launch, where a device assert is a no-op and an
    out-of-bounds load can kill the process without a Python error.
    """
