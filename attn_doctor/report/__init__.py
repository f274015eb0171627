"""Report formats: the human report (text), and machine formats (JSON, SARIF, JUnit, ...)."""
