"""Puts ``tests/`` on the import path (pytest does so for a folder with a conftest), so every
test imports the shared fixtures that live here, such as ``synthetic``."""
