"""The rules of forgetting: lifetime arithmetic, scoring inputs, supersession and resolution, dedupe, tags,
input validation."""
