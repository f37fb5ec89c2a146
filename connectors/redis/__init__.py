"""Redis: the client, the results tier's writer, the function library, keys, ACLs, and the job's load reports,
decisions and handed-over state kept there."""
