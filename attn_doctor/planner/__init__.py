"""Which wheel fits a stack: one planner per package (interface.Planner), each answering from the
release facts alone (no network, no torch import): the one command that fits, and why; or, when
nothing fits, each way out complete."""
