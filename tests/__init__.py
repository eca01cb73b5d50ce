"""Test suite of crasp_compiler; a package so that helpers import as ``tests.support.strategies``."""
