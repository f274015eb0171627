"""One module per repro: ``run_case(case, device, seed) -> dict`` runs inside a child process.

The dict has ``outcome`` (match, mismatch, refused, skipped) and ``detail``; anything raised
is reported by the child as an exception and classified by the runner.
"""
