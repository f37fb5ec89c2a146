"""Synthetic workloads as pure generators: paper 000's b-model (`b_model`), the band-join benchmark's (`band`)
and events that follow a PMJoin STATS file (`sites`)."""
