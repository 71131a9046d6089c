"""Dispatch: jobs out to hosts (inline or Ray), GPU placement, the sweep's lock."""
