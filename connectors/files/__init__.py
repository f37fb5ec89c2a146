"""Files and Parquet: the results' writer and layout, snapshots, spill files, the checkpoint's layout record and
the small files one process hands another."""
