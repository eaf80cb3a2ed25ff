"""Files and streams fed to the job and the evaluation: the real datasets' loaders, the report
streams to replay, and requirement files."""
