"""`attn-doctor fix`: the smallest set of version changes that clears the failing findings.

candidates (the versions the rules name) -> evaluate (the real matcher, memoized) -> search
(branch and bound, deterministic) -> plan (what changes, what each clears, what stays and why).
Nothing in the `check` path imports this package.
"""
