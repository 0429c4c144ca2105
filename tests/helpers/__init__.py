"""Helpers shared by test modules. A test module imports from here, never from another test
module (tests/test_no_test_imports.py checks it)."""
