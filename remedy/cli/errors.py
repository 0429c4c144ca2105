class UsageError(Exception):
    """Bad input found before anything was launched or written; exit status 2."""
