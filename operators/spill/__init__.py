"""Memory adaptation of partition groups (paper 004): statistics, disk pushes, exact clean-up, relocation plans."""
