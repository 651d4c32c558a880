"""A queue manager's life: create, start (restart recovery), stop, delete."""
