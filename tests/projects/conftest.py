"""tests/projects/*/tree/ holds upstream projects' files copied verbatim (issue 37): never collected."""

collect_ignore_glob = ["*/tree"]
