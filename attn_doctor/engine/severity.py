"""Rule severities, most severe first: a module of its own so that reading the project
configuration (``fail-on``) does not import the rule schema and its specifier parser."""

SEVERITIES = ("error", "warning", "info")
