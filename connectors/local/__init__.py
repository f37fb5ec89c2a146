"""The local machine: embedded services, child processes owned by PID, and credentials read from files."""
