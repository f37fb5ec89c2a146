"""PMJoin: planning distributed multi-way window joins by stream partitioning (Zhou et al.)."""
