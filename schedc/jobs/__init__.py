"""A job on a mesh: a model trained with pipeline, tensor, sequence, context, expert and data
parallelism; what each rank holds and how long a step takes."""
