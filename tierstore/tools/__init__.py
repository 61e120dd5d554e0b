"""The tierstore command and its demo."""
