"""Adapters for agent frameworks: :mod:`.langchain` (extra ``langchain``) and
:mod:`.langgraph` (extra ``langgraph``). Each imports its framework lazily,
raising MissingDependencyError naming the extra when it is absent."""

from tierstore.integrations.policy import adapter_policy, check_adapter_policy

__all__ = ["adapter_policy", "check_adapter_policy"]
