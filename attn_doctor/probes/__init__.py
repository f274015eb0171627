"""Live probes: drive the installed libraries' own code paths in a child process.

A version rule says "probably affected"; a probe says "this installation does it". Each probe
module defines ``run() -> list[Observation]`` and is only imported inside a child process.
"""
