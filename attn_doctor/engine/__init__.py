"""The rules engine: the schema, loading the database, and matching rules to an environment."""
