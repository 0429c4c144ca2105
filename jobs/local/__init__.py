from remedy.jobs.local.backend import LocalBackend

__all__ = ["LocalBackend"]
