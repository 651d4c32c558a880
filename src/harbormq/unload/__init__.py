"""Queue contents as files: the load file format that the pipeline's rebuild
writes and ``load`` puts back on a queue."""
