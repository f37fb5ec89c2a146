"""The result-query language, pure: the names a query selects, its conditions (parsed, checked, evaluated), its
cursors, and its typed errors; `connectors/results/result_query.py` reads the tiers with them."""
