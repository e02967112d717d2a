"""Analysis: pure statistics and the evidence grade over run results and a plan."""
