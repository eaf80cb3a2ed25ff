"""Re-deriving a job's privacy accounting from its topics alone (``pwevent audit``)."""
