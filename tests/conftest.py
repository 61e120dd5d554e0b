"""Shared pytest fixtures for the tierstore tests."""

from s3_fixtures import *  # noqa: F401,F403
